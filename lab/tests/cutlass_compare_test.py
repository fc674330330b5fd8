#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tests lab/scripts/cutlass_compare.py on synthetic cutlass_profiler CSVs.

The CSVs have the columns cutlass_profiler v4.3.5 writes for --operation=Gemm
(tools/profiler/src/performance_report.cpp: print_csv_header_ and
print_result_csv_; the argument columns are the GEMM profiler's arguments and
the tile description's, in tools/profiler/src/gemm_operation_profiler.cu and
operation_profiler.cu), with the values it writes (Provider "CUTLASS", Status
"success" or e.g. "internal", Disposition "not_verified"). The script runs as
the comparison driver runs it, as a program; its JSON is checked against
numbers known by construction.

The region reports (KREX_CUTLASS_REPORTS: <run>.regions.jsonl beside
<run>.gemm.csv, one line per region as the patched profiler's
krex_cutlass::scope writes it, with krex::to_json's clocks_entry/clocks_exit)
are synthetic too: each sample's region has a known SM clock, power and
clocks-event reasons, so that the region section's groups and correlations are
known, and a wrong join (across runs, problems or kernels) changes them.
"""
import csv
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "cutlass_compare.py")

GEMM_ARGS = ["gemm_kind", "m", "n", "k", "A", "B", "C", "D", "alpha", "beta", "split_k_mode",
             "split_k_slices", "batch_count", "raster_order", "runtime_input_datatype_a",
             "runtime_input_datatype_b", "use_pdl", "enable_sm90_mixed_dtype_shuffle_test", "swizzle_size"]
TILE_ARGS = ["op_class", "accum", "cta_m", "cta_n", "cta_k", "cluster_m", "cluster_n", "cluster_k",
             "cluster_m_fallback", "cluster_n_fallback", "cluster_k_fallback", "stages", "warps_m",
             "warps_n", "warps_k", "inst_m", "inst_n", "inst_k", "min_cc", "max_cc"]
HEADER = (["Problem", "Provider", "OperationKind", "Operation", "Disposition", "Status"] + GEMM_ARGS +
          TILE_ARGS + ["Bytes", "Flops", "Flops/Byte", "Runtime", "GB/s", "GFLOPs"])

K = "cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_"
KA = K + "128x256x64_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma"
KB = K + "256x128x64_2x1x1_0_tnn_align8_warpspecialized_cooperative_epi_tma"
KC = K + "128x128x64_1x2x1_0_tnn_align8_warpspecialized_pingpong_epi_tma"
P1 = (2048, 4096, 4096)
P2 = (8192, 8192, 4096)


def problem_indices(results):
    """{problem: the Problem column}: the profiler's report counts problems from 1."""
    return {p: i + 1 for i, p in enumerate(sorted({p for p, _ in results}))}


def write_csv(path, results, status=None):
    """results: {(problem, kernel): runtime_ms}; status: {(problem, kernel): status}."""
    status = status or {}
    index = problem_indices(results)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        for (p, kern), t in sorted(results.items()):
            m, n, k = p
            st = status.get((p, kern), "success")
            args = ["universal", m, n, k, "f16:row", "f16:column", "f16:column", "f16:column", 1, 0,
                    "serial", 1, 1, "heuristic", "", "", 0, "false", 1]
            tile = ["tensorop", "f32", 128, 256, 64, 1, 2, 1, 0, 0, 0, 0, 4, 1, 1, 64, 256, 16, 90, 90]
            flops = 2 * m * n * k
            byts = 2 * (m * k + n * k + 2 * m * n)
            tail = [byts, flops, flops / byts, t]
            tail += [byts / t / 1e6, flops / t / 1e6] if st == "success" else ["", ""]
            w.writerow([index[p], "CUTLASS", "gemm", kern, "not_verified", st] + args + tile + tail)


def clocks(sm, power_w, reasons=0):
    """A device_clocks as krex::to_json writes it."""
    return {"sm_mhz": sm, "mem_mhz": 3201, "power_mw": int(power_w * 1000), "temp_c": 50, "reasons": reasons}


def region_line(index, kernel, runtime, entry, exit_, pid=4711):
    """One line of KREX_CUTLASS_REPORTS (docs/CUTLASS.md), the report cut to some of its fields."""
    report = {"level": "gate+drain+freeze(cgroup2)+quiet+pin", "epoch": 7, "ticket": 3, "siblings_seen": 7,
              "gated": True, "quiet_checked": True, "quiet": True, "quiet_last_ratio": 1.01,
              "clocks_entry": entry, "clocks_exit": exit_, "warnings": []}
    return json.dumps({"pid": pid, "device": 0, "problem_index": index, "operation": kernel,
                       "runtime_ms": runtime, "report": report}, separators=(",", ":"))


SOLO = {(P1, KA): 0.100, (P1, KB): 0.104, (P1, KC): 0.130,
        (P2, KA): 0.800, (P2, KB): 0.790, (P2, KC): 0.900}


def write_file(path, text, mode=None):
    """Writes `text` to `path` (with `mode`, e.g. 0o755 for a fake program); returns path."""
    with open(path, "w") as f:
        f.write(text)
    if mode is not None:
        os.chmod(path, mode)
    return path


class CompareCase(unittest.TestCase):
    """Synthetic runs in a temporary folder, and the script run on them."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.n = 0

    def tearDown(self):
        self.dir.cleanup()

    def csv(self, results, status=None):
        self.n += 1
        path = os.path.join(self.dir.name, f"run{self.n}.gemm.csv")
        write_csv(path, results, status)
        return path

    def regions(self, csv_path, lines):
        """Writes the run's X.regions.jsonl beside its X.gemm.csv."""
        with open(csv_path[:-len(".gemm.csv")] + ".regions.jsonl", "w") as f:
            f.write("".join(line + "\n" for line in lines))

    def compare(self, solo, modes, extra=()):
        out = os.path.join(self.dir.name, "compare.json")
        argv = [sys.executable, SCRIPT, ",".join(solo)]
        argv += [f"{m}={','.join(files)}" for m, files in modes.items()]
        argv += list(extra) + ["--json", out]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            return json.load(f), p.stdout

    def scaled(self, factors):
        return {key: t * factors.get(key, 1.0) for key, t in SOLO.items()}


class CutlassCompare(CompareCase):

    def test_identical_runs_show_no_inflation_and_no_flips(self):
        solo = [self.csv(SOLO) for _ in range(3)]
        same = [self.csv(SOLO) for _ in range(8)]
        r, md = self.compare(solo, {"krex": same})
        m = r["modes"]["krex"]
        self.assertEqual(m["runs"], 8)
        self.assertEqual(m["samples"], 8 * len(SOLO))
        self.assertAlmostEqual(m["worst_inflation"], 0.0)
        self.assertEqual(m["winner_flips"], 0)
        self.assertEqual(m["inversions"], 0)
        self.assertEqual(m["failed_results"], 0)
        p1 = "m=2048 n=4096 k=4096 batch_count=1 A=f16:row B=f16:column"
        self.assertEqual(r["problems"][p1]["solo_ranking"], [KA, KB, KC])
        self.assertAlmostEqual(r["problems"][p1]["gap_first_second"], 0.04)
        self.assertIn("| krex |", md)

    def test_inflation_percentiles_and_worst_are_over_all_runs(self):
        solo = [self.csv(SOLO)]
        # KA on P1 inflated by 10%, 20%, ..., 80% across 8 processes; the rest untouched.
        runs = [self.csv(self.scaled({(P1, KA): 1 + 0.1 * i})) for i in range(1, 9)]
        r, _ = self.compare(solo, {"unprotected": runs})
        p1 = "m=2048 n=4096 k=4096 batch_count=1 A=f16:row B=f16:column"
        e = r["problems"][p1]["kernels"][KA]["modes"]["unprotected"]
        self.assertEqual(e["samples"], 8)
        self.assertAlmostEqual(e["median_inflation"], 0.45)
        self.assertAlmostEqual(e["worst_inflation"], 0.8)
        self.assertAlmostEqual(e["p95_inflation"], 0.1 * (1 + 0.95 * 7), places=9)
        other = r["problems"][p1]["kernels"][KB]["modes"]["unprotected"]
        self.assertAlmostEqual(other["worst_inflation"], 0.0)

    def test_ranking_flips_and_inversions_are_counted_per_run(self):
        solo = [self.csv(SOLO) for _ in range(2)]
        runs = [
            self.csv(self.scaled({(P1, KA): 1.10})),              # P1: KB, KA, KC: winner flip, 1 inversion
            self.csv(self.scaled({(P1, KA): 1.40})),              # P1: KB, KC, KA: winner flip, 2 inversions
            self.csv(self.scaled({(P2, KB): 1.02})),              # P2: KA, KB, KC: winner flip, 1 inversion
            self.csv(SOLO),                                       # nothing
        ]
        r, _ = self.compare(solo, {"unprotected": runs})
        p1 = "m=2048 n=4096 k=4096 batch_count=1 A=f16:row B=f16:column"
        p2 = "m=8192 n=8192 k=4096 batch_count=1 A=f16:row B=f16:column"
        s1 = r["problems"][p1]["ranking"]["unprotected"]
        self.assertEqual((s1["runs"], s1["winner_flips"], s1["inversions"], s1["pairs_compared"]), (4, 2, 3, 12))
        self.assertEqual(s1["runs_with_any_inversion"], 2)
        s2 = r["problems"][p2]["ranking"]["unprotected"]
        self.assertEqual((s2["winner_flips"], s2["inversions"]), (1, 1))
        self.assertEqual(r["problems"][p2]["solo_ranking"], [KB, KA, KC])
        self.assertEqual(r["modes"]["unprotected"]["winner_flips"], 3)
        self.assertEqual(r["modes"]["unprotected"]["inversions"], 4)
        # The solo runs against their own median: the noise floor, here none.
        self.assertEqual(r["modes"]["solo"]["winner_flips"], 0)

    def test_pairs_are_counted_by_how_far_apart_solo_puts_them(self):
        # P1: KA-KB 4% apart (close), KC 25-30% behind both (far); P2: KB-KA 1.3%
        # apart (within the default 2% noise gap: counted in no band), KC far.
        solo = [self.csv(SOLO) for _ in range(2)]
        runs = [
            self.csv(self.scaled({(P1, KA): 1.10})),  # P1 KB, KA, KC: the close pair inverted
            self.csv(self.scaled({(P1, KA): 1.40})),  # P1 KB, KC, KA: close and one far pair inverted
            self.csv(self.scaled({(P2, KB): 1.02})),  # P2 KA, KB, KC: only the pair within the noise
        ]
        r, md = self.compare(solo, {"unprotected": runs})
        m = r["modes"]["unprotected"]
        self.assertEqual((m["close_inversions"], m["close_pairs_compared"]), (2, 3))
        self.assertEqual((m["far_inversions"], m["far_pairs_compared"]), (1, 12))
        self.assertEqual(m["inversions"], 4)  # the totals still count every pair
        self.assertEqual(r["min_gap"], 0.02)
        self.assertIn("close (2-5%) inversions", md)
        # A wider gap leaves P1's 4% pair out of the close band.
        r, _ = self.compare(solo, {"unprotected": runs}, extra=["--min-gap", "0.045"])
        m = r["modes"]["unprotected"]
        self.assertEqual((m["close_pairs_compared"], m["far_pairs_compared"]), (0, 12))

    def test_a_bad_min_gap_is_refused(self):
        solo = self.csv(SOLO)
        for bad in ("0", "0.2", "two"):
            p = subprocess.run([sys.executable, SCRIPT, solo, "krex=" + solo, "--min-gap", bad],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn("--min-gap wants a fraction", p.stderr)

    def test_solo_noise_floor_counts_solo_flips(self):
        # Two solo runs disagree on P1's winner; the median ranks KA first (ties by name).
        solo = [self.csv(self.scaled({(P1, KA): 1.00})), self.csv(self.scaled({(P1, KA): 1.08})),
                self.csv(self.scaled({(P1, KA): 0.99}))]
        r, _ = self.compare(solo, {"krex": [self.csv(SOLO)]})
        p1 = "m=2048 n=4096 k=4096 batch_count=1 A=f16:row B=f16:column"
        self.assertEqual(r["problems"][p1]["ranking"]["solo"]["winner_flips"], 1)
        self.assertAlmostEqual(r["problems"][p1]["kernels"][KA]["solo_spread"], 1.08 / 0.99 - 1)

    def test_failed_rows_are_counted_not_timed(self):
        solo = [self.csv(SOLO)]
        bad = self.csv(self.scaled({(P1, KA): 50.0}), status={(P1, KA): "internal"})
        r, _ = self.compare(solo, {"krex": [bad]}, extra=["--lost", "krex=2"])
        m = r["modes"]["krex"]
        self.assertEqual(m["failed_results"], 1)
        self.assertEqual(m["samples"], len(SOLO) - 1)
        self.assertAlmostEqual(m["worst_inflation"], 0.0)
        self.assertEqual(m["lost_leases"], 2)
        p1 = "m=2048 n=4096 k=4096 batch_count=1 A=f16:row B=f16:column"
        st = r["problems"][p1]["ranking"]["krex"]
        self.assertEqual((st["runs"], st["runs_missing_a_kernel"]), (0, 1))

    def test_a_file_that_is_not_a_profiler_csv_is_refused(self):
        path = write_file(os.path.join(self.dir.name, "other.csv"), "a,b\n1,2\n")
        p = subprocess.run([sys.executable, SCRIPT, path, "krex=" + path], capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("not a cutlass_profiler CSV", p.stderr)


# The krex mode's two runs: per sample (inflation, entry (SM MHz, W, reasons),
# exit (SM MHz, W, reasons)). Inflation falls with the exit SM clock (Spearman
# -1); the exit power splits the samples otherwise (median 622.5 W); run A's
# P2 KA and run B's P2 KB have a power cap (0x4) at exit, run B's P2 KA at
# entry; 0x1 (idle) is not a slowdown.
RUN_A = {(P1, KA): (0.00, (1980, 560, 0), (1980, 600, 0x1)),
         (P1, KB): (0.00, (1980, 560, 0), (1980, 720, 0)),
         (P1, KC): (0.10, (1980, 560, 0), (1800, 700, 0)),
         (P2, KA): (0.20, (1750, 560, 0), (1700, 690, 0x4)),
         (P2, KB): (0.00, (1980, 560, 0), (1980, 610, 0)),
         (P2, KC): (0.10, (1980, 560, 0), (1800, 680, 0))}
RUN_B = {(P1, KA): (0.10, (1980, 560, 0), (1800, 602, 0)),
         (P1, KB): (0.00, (1980, 560, 0), (1980, 605, 0)),
         (P1, KC): (0.00, (1980, 560, 0), (1980, 615, 0)),
         (P2, KA): (0.00, (1900, 560, 0x4), (1980, 601, 0)),
         (P2, KB): (0.30, (1700, 560, 0), (1650, 710, 0x5)),
         (P2, KC): (0.00, (1980, 560, 0), (1980, 630, 0))}


class CutlassCompareRegions(CompareCase):
    """The region section: samples joined to their region's report by run, problem index and kernel."""

    def run_with_regions(self, run, extra_lines=(), tail=""):
        """A krex run whose runtimes are SOLO * (1 + inflation) and its region lines, in reverse order."""
        results = {key: SOLO[key] * (1 + infl) for key, (infl, _, _) in run.items()}
        path = self.csv(results)
        index = problem_indices(results)
        lines = [region_line(index[p], k, results[(p, k)], clocks(*e), clocks(*x))
                 for (p, k), (_, e, x) in sorted(run.items())]
        self.regions(path, list(reversed(lines)) + list(extra_lines))
        if tail:
            with open(path[:-len(".gemm.csv")] + ".regions.jsonl", "a") as f:
                f.write(tail)
        return path

    def test_inflation_is_grouped_by_its_own_regions_clocks_and_power(self):
        solo = [self.csv(SOLO)]
        a = self.run_with_regions(RUN_A, tail='{"pid":1,"device":0,"problem_index":1,"operat')  # cut off
        b = self.run_with_regions(RUN_B, extra_lines=[
            # P2 KC timed a second time (another loop, not the CSV's): not joined
            region_line(2, KC, 5.0, clocks(1980, 560), clocks(1500, 500)),
            # a loop that failed (runtime null) of a kernel without a sample
            region_line(1, K + "other", None, clocks(1980, 560), clocks(1980, 560))])
        sk = self.csv(SOLO)
        index = problem_indices(SOLO)
        self.regions(sk, [region_line(index[p], k, SOLO[(p, k)], clocks(1980, 500), clocks(1980, 540))
                          for (p, k) in sorted(SOLO)])
        unp = self.csv(self.scaled({(P1, KA): 1.5}))  # no regions file: not in the section
        r, md = self.compare(solo, {"solo-krex": [sk], "unprotected": [unp], "krex": [a, b]})
        g = r["regions"]
        self.assertEqual(g["sm_max_mhz"], 1980)
        self.assertEqual(sorted(g["modes"]), ["krex", "solo-krex"])
        m = g["modes"]["krex"]
        self.assertEqual((m["runs"], m["runs_with_reports"], m["samples"], m["joined"]), (2, 2, 12, 12))
        self.assertEqual((m["region_lines"], m["unreadable_lines"], m["lines_without_sample"]), (14, 1, 2))
        self.assertEqual(m["runtime_mismatches"], 0)
        self.assertEqual((m["slowdown_at_entry"], m["slowdown_at_exit"]), (1, 2))
        self.assertEqual((m["exit_sm_mhz_median"], m["exit_sm_mhz_min"]), (1980, 1650))
        self.assertEqual((m["exit_power_w_median"], m["exit_power_w_max"]), (622.5, 720))
        self.assertAlmostEqual(m["spearman_inflation_exit_sm"], -1.0)
        # Ranks by hand: inflation 4 (x7), 9 (x3), 11, 12; power 1..12; 61 / sqrt(113 * 143).
        self.assertAlmostEqual(m["spearman_inflation_exit_power"], 61 / (113 * 143) ** 0.5)
        want = {"exit_sm_at_max": (7, 0.0), "exit_sm_below_max": (5, 0.10),
                "entry_sm_at_max": (9, 0.0), "entry_sm_below_max": (3, 0.20),
                "exit_power_above_median": (6, 0.10), "exit_power_at_most_median": (6, 0.0),
                "slowdown_at_entry": (1, 0.0), "no_slowdown_at_entry": (11, 0.0),
                "slowdown_at_exit": (2, 0.25), "no_slowdown_at_exit": (10, 0.0)}
        for key, (n, med) in want.items():
            self.assertEqual(m["groups"][key]["samples"], n, key)
            self.assertAlmostEqual(m["groups"][key]["median_inflation"], med, msg=key)
        self.assertAlmostEqual(m["groups"]["exit_sm_below_max"]["p95_inflation"], 0.28)
        s = g["modes"]["solo-krex"]
        self.assertEqual((s["joined"], s["groups"]["exit_sm_at_max"]["samples"]), (6, 6))
        self.assertEqual(s["groups"]["exit_sm_below_max"]["samples"], 0)
        self.assertIsNone(s["spearman_inflation_exit_sm"])  # a constant clock
        # compare.md: the section after the summary, a row per mode and per group.
        self.assertLess(md.index("### Summary per mode"), md.index("### Inflation against each region's own"))
        self.assertIn("| krex | 2 / 2 | 14 | 12 | 12 | 0 | 2 | 1980 / 1650 | 622.5 / 720.0 | 1 / 2 | "
                      "-1.00 | +0.48 |", md)
        self.assertIn("| krex | exit SM clock below max | 5 | +10.0% | +28.0% |", md)
        self.assertIn("| krex | exit power > median (622.5 W) | 6 | +10.0% |", md)
        self.assertIn("| solo-krex | exit SM clock below max | 0 | n/a | n/a |", md)
        self.assertIn("krex: 1 region report line(s) unreadable, left out.", md)
        self.assertNotIn("| unprotected | exit", md)

    def test_a_line_of_another_loop_is_a_runtime_mismatch(self):
        solo = [self.csv(SOLO)]
        run = {key: (0.0, (1980, 500, 0), (1980, 600, 0)) for key in SOLO}
        path = self.csv(SOLO)
        index = problem_indices(SOLO)
        self.regions(path, [region_line(index[p], k, SOLO[(p, k)] * (1.01 if (p, k) == (P2, KB) else 1),
                                        clocks(*e), clocks(*x)) for (p, k), (_, e, x) in run.items()])
        r, _ = self.compare(solo, {"krex": [path]})
        m = r["regions"]["modes"]["krex"]
        self.assertEqual((m["joined"], m["runtime_mismatches"]), (6, 1))

    def test_without_region_files_the_section_says_so(self):
        solo = [self.csv(SOLO)]
        r, md = self.compare(solo, {"krex": [self.csv(SOLO)]})
        self.assertEqual(r["regions"], {"note": "no region reports (KREX_CUTLASS_REPORTS not set in this run)"})
        self.assertTrue(md.endswith("### Inflation against each region's own SM clock and power "
                                    "(region reports)\n\nno region reports (KREX_CUTLASS_REPORTS not set in "
                                    "this run)\n"), md[-300:])


FAKE_PROFILER = r"""#!/usr/bin/env python3
# Stands in for cutlass_profiler in the driver test: parses the arguments the
# driver passes, writes <output>.gemm.csv as the profiler does, and prints the
# patch's krex join line when KREX_CUTLASS is not 0, and appends a region line
# per result to KREX_CUTLASS_REPORTS where it is set and not empty.
import itertools, os, sys
sys.path.insert(0, os.environ["FAKE_TEST_DIR"])
import cutlass_compare_test as t
a = dict(x[2:].split("=", 1) for x in sys.argv[1:] if x.startswith("--") and "=" in x)
assert a["operation"] == "Gemm" and a["verification-enabled"] == "false", a
kernels = a["kernels"].split(",")
dims = [[int(v) for v in a[d].split(",")] for d in ("m", "n", "k")]
on = os.environ.get("KREX_CUTLASS", "1") != "0"
if on:
    print("krex: cutlass_profiler on CUDA device 0 joined segment x (gating: cupti)", file=sys.stderr)
res = {(p, k): 0.001 * (p[0] * p[1] * p[2]) ** (1 / 3) * (1 + 0.01 * i)
       for p in itertools.product(*dims) for i, k in enumerate(kernels)}
t.write_csv(a["output"] + ".gemm.csv", res)
# --krex-placements=K > 1: a placements line per loop, as the patched profiler writes;
# kernel i's spread is i + 1 percent.
k = int(a.get("krex-placements", "1"))
if k > 1:
    assert a["krex-placement-budget"] == os.environ["FAKE_EXPECT_BUDGET"], a
    for (p, kern), ms in sorted(res.items()):
        print(f"krex: cutlass_profiler: placements: problem 1, {kern}, device 0: K={k}, "
              f"spread {kernels.index(kern) + 1:.2f}% (placement medians {ms:.6f}-{ms:.6f} ms per launch, "
              f"40 launches), 96.0 MiB", file=sys.stderr)
if on and os.environ.get("KREX_CUTLASS_REPORTS"):
    index = t.problem_indices(res)
    c = t.clocks(1980, 600)
    with open(os.environ["KREX_CUTLASS_REPORTS"], "a") as f:
        for (p, k), ms in sorted(res.items()):
            f.write(t.region_line(index[p], k, ms, c, c, pid=os.getpid()) + "\n")
"""


FAKE_NVIDIA_SMI = r"""#!/usr/bin/env bash
# Stands in for nvidia-smi: dmon prints its header and a sample every 0.2 s
# until it is killed; the power limit query prints 700.00.
case "$*" in
  *dmon*)
    echo "#Time         gpu    pwr  gtemp  mtemp   mclk   pclk "
    echo "#HH:MM:SS     Idx      W      C      C    MHz    MHz "
    while true; do echo " $(date +%T)       0    650     50     55   3201   1755 "; sleep 0.2; done ;;
  *power.limit*) echo "700.00" ;;
  *) echo "name, driver_version"; echo "Fake GPU, 0" ;;
esac
"""


class CutlassCompareDriver(unittest.TestCase):
    """lab/scripts/cutlass_compare.sh with a stand-in profiler: the phases, the files, the counts."""

    def test_driver_logs_power_and_clocks_per_phase_where_nvidia_smi_is(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        with tempfile.TemporaryDirectory() as d:
            bindir = os.path.join(d, "bin")
            os.mkdir(bindir)
            for name, text in (("cutlass_profiler", FAKE_PROFILER), ("nvidia-smi", FAKE_NVIDIA_SMI)):
                write_file(os.path.join(bindir, name), text, 0o755)
            kl = write_file(os.path.join(d, "kernels.txt"), f"{KA}\n{KB}\n")
            out = os.path.join(d, "out")
            env = dict(os.environ, KREX_CUTLASS_PROFILER=os.path.join(bindir, "cutlass_profiler"),
                       KREX_CUTLASS_KERNEL_LIST=kl, OUT=out, KREX_CUTLASS_WORK=os.path.join(d, "work"),
                       KREX_CUTLASS_REPS="1", KREX_CUTLASS_SOLO_REPS="1", KREX_CUTLASS_AFTER_REPS="1",
                       KREX_CUTLASS_PROBLEMS="--m=2048 --n=4096 --k=4096", KREX_CUTLASS_MIN_GAP="0.005",
                       FAKE_TEST_DIR=os.path.dirname(os.path.abspath(__file__)),
                       PATH=bindir + os.pathsep + os.environ["PATH"])
            p = subprocess.run(["bash", os.path.join(root, "lab", "scripts", "cutlass_compare.sh"), "2"], env=env,
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(sorted(os.listdir(out)),
                             ["compare.json", "compare.log", "compare.md", "dmon.log.gz", "runs.tar.gz"])
            with open(os.path.join(out, "compare.md")) as f:
                md = f.read()
            self.assertIn("### GPU power and SM clock per phase", md)
            self.assertIn("samples >= 95% of the limit (700 W)", md)
            for mode in ("solo", "solo-krex", "unprotected", "krex", "solo-after"):
                self.assertRegex(md, rf"\| {mode} \| \d+ \| \d+ \| ")
            with open(os.path.join(out, "compare.json")) as f:
                r = json.load(f)
            self.assertEqual(r["min_gap"], 0.005)  # the driver passes KREX_CUTLASS_MIN_GAP on
            # The fake kernels are 1% apart: with a 0.5% gap the pair is "close".
            self.assertEqual(r["modes"]["krex"]["close_pairs_compared"], 2)
            # dmon was stopped: no nvidia-smi of this test is left running.
            ps = subprocess.run(["pgrep", "-f", os.path.join(bindir, "nvidia-smi")], capture_output=True)
            self.assertEqual(ps.returncode, 1, ps.stdout)

    def test_driver_runs_every_mode_and_writes_its_four_files(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        with tempfile.TemporaryDirectory() as d:
            fake = write_file(os.path.join(d, "cutlass_profiler"), FAKE_PROFILER, 0o755)
            # An nvidia-smi on the PATH (as on a GPU machine): KREX_CUTLASS_DMON=0 keeps dmon off.
            bindir = os.path.join(d, "bin")
            os.mkdir(bindir)
            write_file(os.path.join(bindir, "nvidia-smi"), FAKE_NVIDIA_SMI, 0o755)
            kl = write_file(os.path.join(d, "kernels.txt"), f"{KA}\n{KB}\n{KC}\n")
            out = os.path.join(d, "out")
            env = dict(os.environ, KREX_CUTLASS_PROFILER=fake, KREX_CUTLASS_KERNEL_LIST=kl, OUT=out,
                       KREX_CUTLASS_WORK=os.path.join(d, "work"), KREX_CUTLASS_REPS="2",
                       KREX_CUTLASS_SOLO_REPS="2", KREX_CUTLASS_AFTER_REPS="1",
                       KREX_CUTLASS_PROBLEMS="--m=2048,8192 --n=4096 --k=4096", KREX_CUTLASS_DMON="0",
                       FAKE_TEST_DIR=os.path.dirname(os.path.abspath(__file__)),
                       PATH=bindir + os.pathsep + os.environ["PATH"])
            bad = subprocess.run(["bash", os.path.join(root, "lab", "scripts", "cutlass_compare.sh"), "3"],
                                 env=dict(env, KREX_CUTLASS_DMON="yes"), capture_output=True, text=True,
                                 timeout=60)
            self.assertEqual(bad.returncode, 2)
            self.assertIn("KREX_CUTLASS_DMON is 0 or 1", bad.stderr)
            p = subprocess.run(["bash", os.path.join(root, "lab", "scripts", "cutlass_compare.sh"), "3"], env=env,
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(sorted(os.listdir(out)), ["compare.json", "compare.log", "compare.md", "runs.tar.gz"])
            with open(os.path.join(out, "compare.json")) as f:
                r = json.load(f)
            runs = {m: r["modes"][m]["runs"] for m in r["modes"]}
            self.assertEqual(runs, {"solo": 2, "solo-krex": 2, "unprotected": 6, "krex": 6, "solo-after": 1})
            self.assertEqual(len(r["problems"]), 2)
            self.assertEqual(r["modes"]["krex"]["samples"], 6 * 2 * 3)
            with open(os.path.join(out, "compare.log")) as f:
                log = f.read()
            # The modes with regions wrote their reports beside their CSVs, into runs.tar.gz.
            with tarfile.open(os.path.join(out, "runs.tar.gz")) as tar:
                names = sorted(os.path.basename(n) for n in tar.getnames() if n.endswith(".regions.jsonl"))
            self.assertEqual(names, ["krex-p1-r1.regions.jsonl", "krex-p1-r2.regions.jsonl",
                                     "krex-p2-r1.regions.jsonl", "krex-p2-r2.regions.jsonl",
                                     "krex-p3-r1.regions.jsonl", "krex-p3-r2.regions.jsonl",
                                     "solo-krex-p1-r1.regions.jsonl", "solo-krex-p1-r2.regions.jsonl"])
            self.assertEqual(sorted(r["regions"]["modes"]), ["krex", "solo-krex"])
            g = r["regions"]["modes"]["krex"]
            self.assertEqual((g["samples"], g["joined"], g["runtime_mismatches"]), (36, 36, 0))
            self.assertIn("krex: 3 x 2 runs", log)
            self.assertIn("krex joins 6;", log)
            self.assertIn("unprotected: 3 x 2 runs", log)
            self.assertRegex(log, r"unprotected: .* krex joins 0;")

    def test_driver_passes_placements_on_and_counts_their_loops(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        with tempfile.TemporaryDirectory() as d:
            fake = write_file(os.path.join(d, "cutlass_profiler"), FAKE_PROFILER, 0o755)
            kl = write_file(os.path.join(d, "kernels.txt"), f"{KA}\n{KB}\n{KC}\n")
            out = os.path.join(d, "out")
            env = dict(os.environ, KREX_CUTLASS_PROFILER=fake, KREX_CUTLASS_KERNEL_LIST=kl, OUT=out,
                       KREX_CUTLASS_WORK=os.path.join(d, "work"), KREX_CUTLASS_REPS="1",
                       KREX_CUTLASS_SOLO_REPS="1", KREX_CUTLASS_AFTER_REPS="1",
                       KREX_CUTLASS_PROBLEMS="--m=2048 --n=4096 --k=4096", KREX_CUTLASS_DMON="0",
                       KREX_CUTLASS_PLACEMENTS="8", KREX_CUTLASS_PLACEMENT_BUDGET="4096",
                       FAKE_EXPECT_BUDGET="4096", FAKE_TEST_DIR=os.path.dirname(os.path.abspath(__file__)))
            script = os.path.join(root, "lab", "scripts", "cutlass_compare.sh")
            for var, value, said in (("KREX_CUTLASS_PLACEMENTS", "0", "KREX_CUTLASS_PLACEMENTS is a whole number >= 1"),
                                     ("KREX_CUTLASS_PLACEMENTS", "eight", "not 'eight'"),
                                     ("KREX_CUTLASS_PLACEMENT_BUDGET", "4G", "KREX_CUTLASS_PLACEMENT_BUDGET is MiB")):
                bad = subprocess.run(["bash", script, "2"], env=dict(env, **{var: value}), capture_output=True,
                                     text=True, timeout=60)
                self.assertEqual(bad.returncode, 2, bad.stdout + bad.stderr)
                self.assertIn(said, bad.stderr)
            p = subprocess.run(["bash", script, "2"], env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(os.path.join(out, "compare.log")) as f:
                log = f.read()
            self.assertIn("--krex-placements=8 --krex-placement-budget=4096", log)
            self.assertIn("placements: 8 (budget: 4096 MiB, 0: none)", log)
            # 3 kernels with spreads 1, 2 and 3%: the median is 2%; 2 processes x 3 in the concurrent phases.
            self.assertRegex(log, r"solo: .*; placement loops 3 \(K=8\), median spread 2\.00%; refused for placements 0")
            self.assertRegex(log, r"krex: .*; placement loops 6 \(K=8\), median spread 2\.00%")
            # Without placements nothing is passed and the phase lines are as before.
            p = subprocess.run(["bash", script, "2"], env=dict(env, KREX_CUTLASS_PLACEMENTS="1"),
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(os.path.join(out, "compare.log")) as f:
                log = f.read()
            self.assertNotIn("--krex-placements", log)
            self.assertNotIn("placement loops", log)


if __name__ == "__main__":
    unittest.main()
