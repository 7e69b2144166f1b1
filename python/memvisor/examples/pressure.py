"""The `pressure` policy (senpai's controller applied to the balloon) written in Python: the
example of a Python policy, and the check that one drives a run exactly as the built-in Rust
`pressure` does (python/tests/test_policy.py). Use it in a scenario as

    [host]
    policy = "python:memvisor.examples.pressure:Pressure"

Rules and sources: docs/sources/kvm-policies.md, `pressure`.
"""

from __future__ import annotations

from memvisor.policy import Policy, balloon_target

MIB = 1 << 20
INTERVAL_TICKS = 6  # senpai --interval
PRESSURE_NS = 10e6  # senpai --pressure, 10 ms
MAX_PROBE, COEFF_PROBE = 0.01, 10.0
MAX_BACKOFF, COEFF_BACKOFF = 1.0, 20.0
MIN_SIZE = 100 * MIB  # senpai --min-size
FAULT_COST_NS = 1_000_000  # a major fault's wait when the guest's stall is unknown


class Pressure(Policy):
    name = "pressure.py"
    period_s = 1.0  # senpai's tick

    def __init__(self):
        self.track: dict[int, dict] = {}

    def decide(self, view: dict) -> list[dict]:
        out = []
        for v in view["vms"]:
            if v["memory_stall_ns"] is not None:
                stall, measured = v["memory_stall_ns"], "guest PSI"
            else:
                stall, measured = v["major_faults"] * FAULT_COST_NS, "major faults"
            t = self.track.setdefault(v["id"], {"last": None, "integral": 0, "grace": INTERVAL_TICKS})
            delta = stall - (stall if t["last"] is None else t["last"])
            t["last"] = stall
            t["integral"] += delta
            size = v["memory"] - v["balloon_target"]
            floor = min(max(MIN_SIZE, v["reservation"]), v["memory"])
            if t["integral"] > PRESSURE_NS:
                err = t["integral"] / PRESSURE_NS
                adj = min((err / COEFF_BACKOFF) * (err / COEFF_BACKOFF) * MAX_BACKOFF, MAX_BACKOFF)
                why = f"stall {t['integral'] / 1e6:.1f} ms ({measured}) over the 10 ms target: grow {adj * 100:.2f} %"
                factor = adj
            elif t["grace"] > 0:
                t["grace"] -= 1
                continue
            else:
                err = PRESSURE_NS / max(t["integral"], 1)
                adj = min((err / COEFF_PROBE) * (err / COEFF_PROBE) * MAX_PROBE, MAX_PROBE)
                why = f"stall {t['integral'] / 1e6:.1f} ms ({measured}) under the 10 ms target: probe down {adj * 100:.2f} %"
                factor = -adj
            t["integral"] = 0
            t["grace"] = INTERVAL_TICKS - 1
            new = min(max(int(size * (1.0 + factor)), floor), v["memory"]) & ~4095
            if new != size:
                out.append(balloon_target(v["id"], v["memory"] - new, f"pressure.py: {why}: guest {size / MIB:.1f} MiB -> {new / MIB:.1f} MiB"))
        return out
