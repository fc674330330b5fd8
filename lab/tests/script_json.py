# SPDX-License-Identifier: Apache-2.0
"""What the lab tests share: run an analysis script that writes its result as
JSON, and read it back."""
import json
import subprocess
import sys


def run_json(script, args, json_path, timeout=60):
    """Runs `script` (with this Python) with `args`; it writes JSON to
    `json_path` when it succeeds. Returns the finished process and that JSON
    (None when the script failed)."""
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                       timeout=timeout)
    out = None
    if p.returncode == 0:
        with open(json_path) as f:
            out = json.load(f)
    return p, out
