"""Issue 40, item 14: SIGINT, SIGTERM and SIGHUP at any moment of a run exit 130, "interrupted"
(docs/manual.md, EXIT STATUS), not 143 or a death by the signal.

Each run starts with the three signals blocked (inherited across exec, as a parent that blocks them
around fork and exec leaves them): the signal sent right after exec then waits, whether it came
while the dynamic loader ran or later, and is delivered at the first moment hpcbake takes it. So
every run tests the earliest moment hpcbake can answer, plus a spread of later ones (0 to 10 ms
after the start), deterministically: a kill that lands before any of hpcbake's code has run
cannot end the process early. Before the fix, such a run finished with 0 (the signals stayed
blocked) and an unblocked one died by the signal (-15 here, 143 in a shell)."""
import collections
import signal
import subprocess
import time
import unittest

from common import BIN, _env, host

RUNS = 200
STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def block_stop_signals():
    signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP))


class EarlySignals(unittest.TestCase):
    def args(self):
        return [BIN, "plan", "--root", host("nd96isr_h100_v5"), "--size", "Standard_ND96isr_H100_v5", "--distro",
                "ubuntu-22.04"]

    def test_a_stop_signal_from_the_first_instruction_on_exits_130(self):
        env = _env(None)
        codes = collections.Counter()
        started = time.monotonic()
        for i in range(RUNS):
            p = subprocess.Popen(self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 stdin=subprocess.DEVNULL, env=env, preexec_fn=block_stop_signals)
            # Popen returns once exec has happened (its error pipe closes on exec).
            if i % 2:
                time.sleep((i % 11) / 1000.0)
            p.send_signal(STOP[i % 3])
            codes[p.wait(timeout=30)] += 1
        self.assertEqual(dict(codes), {130: RUNS}, f"{RUNS} runs in {time.monotonic() - started:.1f} s")

    def test_a_signal_the_run_was_started_with_ignored_stays_ignored(self):
        # nohup, a shell's background job: hpcbake does not take back what its parent ignored.
        def ignore():
            for sig in STOP:
                signal.signal(sig, signal.SIG_IGN)
        p = subprocess.Popen(self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             env=_env(None), preexec_fn=ignore)
        for sig in STOP:
            p.send_signal(sig)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)


if __name__ == "__main__":
    unittest.main()
