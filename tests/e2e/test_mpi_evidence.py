"""run_vm.py's reading of the MPI job's evidence (test_15), on what real e2e runs left in out/mpi/
(tests/fixtures/e2e-mpi, README.md there): the job over RDMA on rxe0 passes; over TCP or shared
memory it fails, saying which transport the ranks used and how far rxe0's counters moved. No VM."""
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_vm  # noqa: E402

FIXTURES = os.path.join(HERE, "..", "fixtures", "e2e-mpi")


def evidence(run):
    def read(name):
        with open(os.path.join(FIXTURES, run, name)) as f:
            return f.read()
    result = json.loads(read("pingpong.json"))
    return (read("mpirun.log"), run_vm.rdma_counters(read("counters-before.txt")),
            run_vm.rdma_counters(read("counters-after.txt")), [r["pid"] for r in result["rank_info"]],
            result["messages"])


class Transport(unittest.TestCase):
    def test_rdma_run_passes(self):
        log, before, after, pids, messages = evidence("rdma")
        self.assertEqual(run_vm.ucx_lanes(log), {p: {("self", "memory0"), ("rc_verbs", "rxe0:1")} for p in pids})
        self.assertGreaterEqual(after["sent_pkts"] - before["sent_pkts"], messages)
        self.assertEqual(run_vm.mpi_transport_problems(log, before, after, pids, messages), [])

    def test_tcp_run_fails(self):
        problems = run_vm.mpi_transport_problems(*evidence("tcp"))
        text = "\n".join(problems)
        self.assertIn("used tcp/veth0: not RDMA on rxe0:1", text)
        self.assertIn("no rc_verbs/ud_verbs lane on rxe0:1", text)
        self.assertIn("rxe0's sent_pkts rose by 0 during the job, fewer than its 1046 messages", text)
        self.assertIn("rxe0's rcvd_pkts rose by 0", text)

    def test_shared_memory_run_fails(self):
        text = "\n".join(run_vm.mpi_transport_problems(*evidence("shm")))
        self.assertIn("used cma/memory, sysv/memory: not RDMA on rxe0:1", text)
        self.assertIn("rxe0's rcvd_pkts rose by 0", text)

    def test_counters_must_cover_every_message(self):
        log, before, after, pids, messages = evidence("rdma")
        delta = after["rcvd_pkts"] - before["rcvd_pkts"]
        problems = run_vm.mpi_transport_problems(log, before, after, pids, delta + 1)
        self.assertIn(f"rxe0's rcvd_pkts rose by {delta} during the job, fewer than its {delta + 1} messages", problems)

    def test_a_rank_without_ucx_report_fails(self):
        log, before, after, pids, messages = evidence("rdma")
        only_first = "\n".join(line for line in log.splitlines() if f":{pids[1]} " not in line)
        problems = run_vm.mpi_transport_problems(only_first, before, after, pids, messages)
        self.assertEqual(problems, [f"rank pid {pids[1]}: no UCX ep_cfg line (UCX_LOG_LEVEL=info) says which "
                                    "transports it used"])

    def test_missing_counters_fail(self):
        log, before, after, pids, messages = evidence("rdma")
        problems = run_vm.mpi_transport_problems(log, {}, {}, pids, messages)
        self.assertEqual(len(problems), 2, problems)
        self.assertTrue(all("rxe0 has no hw_counters/" in p for p in problems), problems)


class Limits(unittest.TestCase):
    def test_limits_files_of_a_plan(self):
        plan = {"steps": [
            {"kind": "config", "id": "config:limits", "detail": {
                "path": "/etc/security/limits.d/90-hpcbake-rdma.conf",
                "content": "# test input\n*  soft  memlock  unlimited\n*  hard  memlock  unlimited\n"
                           "*  -  nofile  65536\nroot  soft  nofile  1\n"}},
            {"kind": "config", "id": "config:other", "detail": {
                "path": "/etc/modprobe.d/x.conf", "content": "* soft memlock 1\n"}},
            {"kind": "packages", "id": "packages:x", "detail": {}}]}
        self.assertEqual(run_vm.limits_files(plan), {"memlock": "unlimited", "nofile": "65536"})
        self.assertEqual(run_vm.limits_files({"steps": []}), {})


if __name__ == "__main__":
    unittest.main(verbosity=2)
