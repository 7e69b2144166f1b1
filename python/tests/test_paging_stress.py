"""Case study paging-stress (seed 003): the shape of the result, with tolerances from principles."""

import memvisor

VARIANTS = [f"{n}-instance" + ("s" if n > 1 else "") for n in range(1, 9)]
KIB = 1024
# Sizes from the case file and the guest it resolves to.
INSTANCE_KIB = 61_036 * 4
DESKTOP_KIB = 870_396
DESKTOP_HOT_KIB = 299_508
SSD_BYTES_PER_S = 550e6


def test_paging_follows_what_fits():
    runs = memvisor.run("paging-stress")
    rows = {r.variant: r.summary["vms"][0] for r in runs}
    rate = [rows[v]["report"]["pgpgin_KiB/s"] for v in VARIANTS]
    write = [rows[v]["report"]["write_s"] for v in VARIANTS]
    counters = rows["1-instance"]["counters"]
    mem_total = counters["MemTotal_KiB"]
    # The memory free pages the watermarks keep: MemTotal less what can be used before kswapd
    # must run (MemFree settles at the high watermark under pressure): from the thrashing run.
    kept = min(r.timeseries.loc[r.timeseries["time_s"] > 0, "MemFree_KiB"].min() for r in runs if r.variant == "8-instances")
    fits_all = [n * INSTANCE_KIB + DESKTOP_KIB + kept < mem_total for n in range(1, 9)]
    fits_hot = [n * INSTANCE_KIB + DESKTOP_HOT_KIB + kept < mem_total for n in range(1, 9)]
    # While everything fits, nothing pages at all (any steady paging would be hundreds of KiB/s).
    for n, (f, r) in enumerate(zip(fits_all, rate), 1):
        if f:
            assert r < 1.0, f"{n} instances fit but page at {r:.1f} KiB/s"
    # Once the hot set (instances + the desktop's active part) no longer fits, every pass faults:
    # the biggest jump between neighbours (not counting the first step up from zero) is there.
    knee = fits_hot.index(False)  # index of the first variant whose hot set does not fit
    ratios = [(rate[i + 1] / rate[i], i + 1) for i in range(len(rate) - 1) if rate[i] > 0]
    assert max(ratios)[1] >= knee, f"rates {rate}: the biggest jump comes before the hot set stops fitting (variant {knee + 1})"
    assert rate[-1] > 10 * max(r for r, f in zip(rate, fits_hot) if f), rate
    # The 1 GiB write is bound by the SSD while nothing pages: within its transfer time and 15 %
    # more (page copies, fsync, the flusher's batching); never faster than the device.
    device = (1 << 30) / SSD_BYTES_PER_S
    for n, (f, w) in enumerate(zip(fits_all, write), 1):
        assert w >= device, f"{n} instances: the write beat the device ({w:.3f} s)"
        if f:
            assert w < 1.15 * device, f"{n} instances: {w:.3f} s for a device-bound {device:.3f} s"
