"""Case study nfs-balloon (seed 001): a reserved VM's stress starves a VM on NFS; with enough host
memory the effect vanishes. Tolerances are the host-reclamation issue's."""

import memvisor
import pytest

PHASES = ["write_KiB/s", "rewrite_KiB/s", "read_KiB/s"]


@pytest.fixture(scope="module")
def runs():
    return {r.variant: r for r in memvisor.run("nfs-balloon")}


def small_of(runs):
    return {v: next(vm for vm in r.summary["vms"] if vm["name"] == "small") for v, r in runs.items()}


def test_a_starved_vm_on_nfs_collapses_and_more_memory_cures_it(runs):
    small = small_of(runs)
    base = small["small-alone"]["report"]

    def most_ballooned(variant):
        ts = runs[variant].timeseries
        return ts.loc[ts["vm"] == "small", "MCTLSZ_MiB"].max()

    # With 8 GiB the host backs both VMs: bonnie runs as alone, within 20 %.
    for p in PHASES:
        assert abs(small["8GiB"]["report"][p] - base[p]) <= 0.2 * base[p], (p, small["8GiB"]["report"][p], base[p])
        assert most_ballooned("8GiB") == 0
    # With 4 GiB and all of big's memory reserved, small is ballooned (a "large" balloon: at least
    # a quarter of its memory) and host-swapped on NFS, and its block write collapses.
    starved = small["4GiB-full-reservation"]
    assert most_ballooned("4GiB-full-reservation") >= 0.25 * 1024, most_ballooned("4GiB-full-reservation")
    assert starved["counters"]["SWR_pages"] > 0, "host swap-ins on NFS"
    assert starved["report"]["write_KiB/s"] < base["write_KiB/s"] / 2
    # With 2.5 GiB reserved the balloon on small is large too, and bonnie slows clearly.
    shared = small["4GiB"]
    assert most_ballooned("4GiB") >= 0.25 * 1024
    assert shared["report"]["write_KiB/s"] < base["write_KiB/s"] / 2
    # big is never reclaimed below its reservation.
    for v, r in runs.items():
        for vm in r.summary["vms"]:
            if vm["name"] == "big":
                reclaimed = vm["counters"]["MCTLSZ_MiB"] + vm["counters"]["SWCUR_MiB"]
                reservation_mib = 3072 if v == "4GiB-full-reservation" else 2560
                assert reclaimed <= 3072 - reservation_mib + 1e-6, (v, reclaimed)


@pytest.mark.xfail(
    strict=True,
    reason="with the filer's whole 2 GiB cache the write lands at about 1/4 of alone; the issue's 1/10 "
    "needs the filer's cache share for this test below about 0.5 GiB (README, nfs-balloon)",
)
def test_the_collapse_reaches_a_tenth(runs):
    # The host-reclamation issue's bound: at 4 GiB, bonnie's block write at most 1/10 of alone
    # (the seed saw 1/40). strict: this fails loudly the day the model reaches it.
    small = small_of(runs)
    assert small["4GiB-full-reservation"]["report"]["write_KiB/s"] <= small["small-alone"]["report"]["write_KiB/s"] / 10
