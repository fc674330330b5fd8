# SPDX-License-Identifier: Apache-2.0
"""How the benchmark drivers and analysis scripts (bench/python/, lab/scripts/)
write what they found: a JSON file, and a driver's JSON and Markdown pair."""
import json
import os


def write_json(path, data):
    """Writes `data` to `path` as JSON (indent 1); nothing when path is empty."""
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=1)


def write_report(out_dir, stem, data, md, total_s):
    """A driver's end: <stem>.json (data) and <stem>.md (md) in out_dir, the
    Markdown printed, then the total time and where it all went."""
    write_json(os.path.join(out_dir, stem + ".json"), data)
    with open(os.path.join(out_dir, stem + ".md"), "w") as f:
        f.write(md)
    print(md)
    print("total %.0f s; written to %s" % (total_s, out_dir))
