"""The run script of a SkyPilot task, and the marker lines it prints for the backend to watch for.

The script starts every replica's server (sky/replicas.py) with its log under LOG_DIR, waits for
`GET /v1/models` (PROBE_PATH) on each within a start-up allowance, prints READY_MARKER per ready replica
and ALL_READY_MARKER once all are, and exits when any replica dies (FAILED_MARKER and its status), so a
crashed server shows as a failed job. The servers take the API key from a SkyPilot secret: without it the
script fails before anything starts, and the readiness probe sends the key as a bearer token.
"""

from __future__ import annotations

from worldtune.sky.replicas import RenderOptions, replica_slices, serve_command
from worldtune.tools.words.deployment import API_KEY_ENV, Deployment

READY_MARKER = "WORLDTUNE_READY"
ALL_READY_MARKER = "WORLDTUNE_ALL_READY"
FAILED_MARKER = "WORLDTUNE_FAILED"
LOG_DIR = "~/.worldtune/serve-logs"
PROBE_PATH = "/v1/models"


def run_script(deployment: Deployment, options: RenderOptions, allowance: int) -> str:
    """Start every replica, wait up to `allowance` s for /v1/models on each, report, then exit when any exits."""
    plan = deployment.plan
    lines = [
        "set -u",
        # the servers take the key from a SkyPilot secret: without it, say so before anything starts
        f'if [ -z "${{{API_KEY_ENV}:-}}" ]; then echo "{FAILED_MARKER} the API key is not set: launch with '
        f"--secret {API_KEY_ENV}=KEY (worldtune's own launch passes it)\"; exit 1; fi",
        f"logs={LOG_DIR}/$SKYPILOT_TASK_ID",
        'mkdir -p "$logs"',
        "pids=()",
        'cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }',
        "trap cleanup EXIT",
        "trap 'exit 143' TERM INT",
    ]
    for replica in replica_slices(plan, options.base_port):
        lines.append(f'{serve_command(deployment, replica, options)} > "$logs/replica-{replica.index}.log" 2>&1 &')
        lines.append("pids+=($!)")
    # the probe sends the API key when the servers have one (an unauthenticated /v1/models answers 401)
    probe = (
        "python3 -c 'import os, sys, urllib.request as u; k = os.environ.get(sys.argv[2]); "
        'u.urlopen(u.Request(sys.argv[1], headers={"Authorization": "Bearer " + k} if k else {}), timeout=5)\' '
        f'"http://127.0.0.1:$port{PROBE_PATH}" {API_KEY_ENV} >/dev/null 2>&1'
    )
    ports = " ".join(str(r.port) for r in replica_slices(plan, options.base_port))
    lines += [
        f"deadline=$((SECONDS + {allowance}))",
        "i=0",
        f"for port in {ports}; do",
        f"  until {probe}; do",
        '    if ! kill -0 "${pids[$i]}" 2>/dev/null; then',
        f'      echo "{FAILED_MARKER} replica=$i port=$port exited before ready"; tail -n 40 "$logs/replica-$i.log"',
        "      exit 1",
        "    fi",
        f'    if [ "$SECONDS" -gt "$deadline" ]; then echo "{FAILED_MARKER} replica=$i port=$port not ready '
        f'in {allowance} s"; exit 1; fi',
        "    sleep 1",
        "  done",
        f'  echo "{READY_MARKER} replica=$i port=$port after=${{SECONDS}}s"',
        "  i=$((i + 1))",
        "done",
        f'echo "{ALL_READY_MARKER}"',
        'wait -n "${pids[@]}"',
        "rc=$?",
        f'echo "{FAILED_MARKER} a replica exited (status $rc)"',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"
