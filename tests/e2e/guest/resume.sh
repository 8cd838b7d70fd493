#!/bin/bash
# ExecStart of hpcbake-e2e-resume.service: a one-shot unit that boot 1 enables and boot 2 runs,
# standing in for hpcbake's own resume unit until `hpcbake install` provides it. It proves the
# mechanics a resume needs: the unit runs on the next boot, before the test driver, with the data
# disk mounted, rxe0 up and the hpcbake binary runnable; then it disables itself (runs once).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
set -u
OUT=/e2e/out
"/e2e/bin/hpcbake" --no-imds detect --json > "$OUT/resume-detect.json" 2> "$OUT/resume-detect.err"
rc=$?
printf '{"unit":"hpcbake-e2e-resume.service","boot_id":"%s","uptime_s":%s,"detect_rc":%d,"rxe0_state":"%s"}\n' \
  "$(cat /proc/sys/kernel/random/boot_id)" "$(cut -d' ' -f1 /proc/uptime)" "$rc" \
  "$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)" > "$OUT/resume.json"
sync
systemctl disable hpcbake-e2e-resume.service
echo "E2E-RESUME: ran on boot $(cat /proc/sys/kernel/random/boot_id), detect rc=$rc"
exit "$rc"
