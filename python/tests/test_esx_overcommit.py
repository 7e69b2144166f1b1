"""Case study esx-overcommit (seed 000): four 8 GiB Windows guests running the .NET heap benchmark on
a 16 GiB ESX host, against one alone and with one of the four reserved. Tolerances are the issue's
(seed 000 end to end); where the model does not reach them the test is a strict xfail, so it fails
loudly the day it does."""

import memvisor
import pytest

GIB = 1024  # MiB


@pytest.fixture(scope="module")
def runs():
    return {r.variant: r for r in memvisor.run("esx-overcommit")}


def vms(run):
    return {vm["name"]: vm for vm in run.summary["vms"]}


def after_build(run, minutes=5):
    """The time series once the heaps are built (the first minutes allocate them)."""
    ts = run.timeseries
    return ts[ts["time_s"] >= minutes * 60]


def test_the_host_goes_hard_and_balloons_about_half_of_each_guest(runs):
    four = runs["four"]
    d = four.decisions
    reached = set(d.loc[d["vm"] == "host", "action"])
    assert reached & {"memory state hard", "memory state low"}, reached
    # Seed 000: balloon targets of about 4 GB per guest; the band is 3-5 GiB.
    targets = four.timeseries.groupby("vm")["MCTLTGT_MiB"].max()
    assert ((targets >= 3 * GIB) & (targets <= 5 * GIB)).all(), targets.to_dict()


def test_the_large_object_heap_stays_between_four_and_six_gib_under_contention(runs):
    # Seed 000: "constrained to between 4 and 6 GBs". 5th-95th percentile per guest, with one
    # 64 MiB object of slack at each end ("about").
    loh = after_build(runs["four"]).groupby("vm")["LOH_MiB"]
    assert (loh.quantile(0.05) >= 4 * GIB - 64).all() and (loh.quantile(0.95) <= 6 * GIB + 64).all(), loh.describe()


def test_collections_under_contention_number_in_the_hundreds_to_low_thousands(runs):
    gcs = [vm["counters"]["gen0_collections"] for vm in runs["four"].summary["vms"]]
    assert all(100 <= n <= 5000 for n in gcs), gcs


def test_the_reserved_guest_is_never_reclaimed_and_beats_every_other(runs):
    r = vms(runs["reserved"])
    res = r["win-a"]
    for col in ["MCTLSZ_MiB", "SWCUR_MiB", "ZIP_pages"]:
        ts = runs["reserved"].timeseries
        assert ts.loc[ts["vm"] == "win-a", col].max() == 0, col
    others = [vm["runtime_s"] for name, vm in r.items() if name != "win-a"]
    assert res["runtime_s"] < min(others), (res["runtime_s"], others)
    # Its remaining slowdown against standalone is the host's backing wait while the others
    # filled the host (it never pages): within that wait plus 1 %.
    alone = vms(runs["standalone"])["win-a"]["runtime_s"]
    extra = res["runtime_s"] - alone
    assert 0 <= extra <= res["counters"]["host_wait_ms"] / 1e3 + 0.01 * alone, (extra, res["counters"]["host_wait_ms"])


@pytest.mark.xfail(
    strict=True,
    reason="the model's four-guest run takes about 35x the standalone one: the benchmark's live heap "
    "(4 GiB) no longer fits once ballooned, and every cycle on a paged-out object reads it back "
    "through the shared disk (README, esx-overcommit)",
)
def test_four_guests_take_two_to_four_times_as_long(runs):
    alone = vms(runs["standalone"])["win-a"]["runtime_s"]
    four = [vm["runtime_s"] for vm in runs["four"].summary["vms"]]
    assert all(2 * alone <= t <= 4 * alone for t in four), (alone, four)


@pytest.mark.xfail(
    strict=True,
    reason="alone, the heap fits the guest: the LOH budget stops growth just short of the low-memory "
    "threshold, so the model makes about 13 collections, not the seed's 1,000 (README, esx-overcommit)",
)
def test_the_standalone_run_collects_hundreds_of_times(runs):
    assert vms(runs["standalone"])["win-a"]["counters"]["gen0_collections"] >= 100


@pytest.mark.slow
def test_host_swapping_is_biased_across_guests_over_five_seeds():
    # The test: the most-swapped guest holds at least twice what the least-swapped one
    # holds, as the median over five seeds (peak SWCUR over the run). The mechanism: host
    # reclamation goes to each VM's compression cache (10 % of its memory) first, and only what
    # overflows it (or does not compress) is swapped; guests whose heaps were a little further
    # along when the host ran out overflow their caches, the others barely do.
    from memvisor import api

    scenarios = [s for seed in range(1, 6) for s in api.load("esx-overcommit", [f"seed={seed}"]) if s.variant == "four"]
    ratios = []
    for r in api.simulate_all(scenarios):
        peak = r.timeseries.groupby("vm")["SWCUR_MiB"].max()
        ratios.append(peak.max() / peak.min())
    ratios.sort()
    assert ratios[2] >= 2, ratios
