"""The planned fleet's SkyServe service: replica policy from the plan, accepted by SkyPilot's schema offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CODE = """
from pathlib import Path; import os, json
from worldtune.sky import home
home.import_skypilot(Path(os.environ['WORLDTUNE_SKY_HOME']))
from worldtune.sky.dryrun import validate_task
from worldtune.sky.fleet_service import render_fleet_service
from worldtune.sky.replicas import RenderOptions
from worldtune.tools.deployments.preview import predicted_cold_load_s
from worldtune.tools.words.fleet import Autoscaler, Fleet
options = RenderOptions(cold_load_s=predicted_cold_load_s('H200', 'cosmos3-super'))
out = []
for auto, cap in ((Autoscaler(policy='fixed', min_replicas=2, max_replicas=2), 'spot'),
                  (Autoscaler(policy='queue', min_replicas=0, max_replicas=3, target_queue_per_server=1,
                              upscale_delay_s=20), 'on-demand'),
                  (Autoscaler(policy='qps', min_replicas=1, max_replicas=2, target_qps_per_replica=0.004), 'spot')):
    fleet = Fleet(plan='cfg2-fp8', gpu='H200', offer_id='nebius/eu-north1/H200:8/' + cap, capacity=cap,
                  servers_per_node=4, service_s=346.0, usd_per_node_hour=11.6, autoscaler=auto,
                  base_ondemand_fallback=1 if cap == 'spot' else 0)
    task = render_fleet_service(fleet, options=options)
    out.append({'policy': task['service']['replica_policy'], 'spot': task['resources'].get('use_spot'),
                'validated': type(validate_task(task)).__name__})
print(json.dumps(out))
"""


def test_fleet_service_fills_the_replica_policy_and_skypilot_accepts_it(tmp_path: Path) -> None:
    env = {**os.environ, "WORLDTUNE_SKY_HOME": str(tmp_path / "h"), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    run = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, run.stderr
    fixed, queue, qps = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(x["validated"] == "Task" for x in (fixed, queue, qps))
    # 2 nodes of 4 servers: 8 SkyServe replicas, 1 node's servers always on-demand
    assert fixed["policy"]["min_replicas"] == fixed["policy"]["max_replicas"] == 8 and fixed["spot"] is True
    assert fixed["policy"]["base_ondemand_fallback_replicas"] == 4 and "target_qps_per_replica" not in fixed["policy"]
    # the queue rule has no SkyServe service equivalent: QPS at the servers' saturation, the rule's delays
    assert queue["policy"]["min_replicas"] == 0 and queue["policy"]["target_qps_per_replica"] == 0.00289
    assert queue["policy"]["upscale_delay_seconds"] == 20
    assert qps["policy"]["target_qps_per_replica"] == 0.001  # the node's target over its 4 servers
