#!/bin/sh
# Fleet host agent for {{ server }}: runs the in-band sanitization commands and posts their raw outputs back.
# Fleet parses them and decides; this script decides nothing. One-time token: a second run is refused.
set -u
OUT=$(mktemp -d)
n=0
record() { # step serial tool command...
  step=$1; serial=$2; tool=$3; shift 3
  n=$((n+1))
  "$@" >"$OUT/$n.out" 2>"$OUT/$n.err"; echo $? >"$OUT/$n.rc"
  printf '%s\t%s\t%s\t%s\n' "$step" "$serial" "$tool" "$*" >"$OUT/$n.meta"
}
for dev in $(ls /dev/nvme[0-9]*n1 2>/dev/null | sed 's/n1$//'); do
  sn=$(nvme id-ctrl "$dev" -o json | sed -n 's/.*"sn" *: *"\([^"]*\)".*/\1/p' | tr -d ' ')
  case " {% for s in nvme_serials %}{{ s }} {% endfor %}" in *" $sn "*) ;; *) continue ;; esac
  record nvme.id-ctrl "$sn" nvme-cli nvme id-ctrl "$dev" -o json
  # the log before the run, right after the start, and at the end: Fleet proves the sanitize is this run's
  record nvme.sanitize-log.before "$sn" nvme-cli nvme sanitize-log "$dev" -o json
  record nvme.sanitize "$sn" nvme-cli nvme sanitize "$dev" --sanact=start-crypto-erase{% if purge %} --preq{% endif %}
  record nvme.sanitize-log.progress "$sn" nvme-cli nvme sanitize-log "$dev" -o json
  while nvme sanitize-log "$dev" -o json | grep -q '(2)'; do sleep 10; done
  record nvme.sanitize-log "$sn" nvme-cli nvme sanitize-log "$dev" -o json
done
{% if has_tpm %}record tpm2_clear "" tpm2-tools tpm2_clear -c p{% endif %}
record nvidia-smi.compute-apps "" nvidia-smi nvidia-smi --query-compute-apps=pid --format=csv,noheader
record nvidia-smi.reset "" nvidia-smi nvidia-smi -r
python3 - "$OUT" <<'PY' | curl -sf -X POST -H 'Content-Type: application/json' \
  -H 'Authorization: AgentToken {{ token }}' --data-binary @- '{{ upload_url }}'
import json, os, sys
d = sys.argv[1]; results = []
for name in sorted((f for f in os.listdir(d) if f.endswith(".meta")), key=lambda f: int(f.split(".")[0])):
    i = name.split(".")[0]
    step, serial, tool, command = open(os.path.join(d, name)).read().rstrip("\n").split("\t", 3)
    results.append({"step": step, "serial": serial, "tool": tool, "command": command,
                    "exit_code": int(open(os.path.join(d, i + ".rc")).read()),
                    "output": open(os.path.join(d, i + ".out")).read()})
print(json.dumps({"server": "{{ server }}", "results": results}))
PY
