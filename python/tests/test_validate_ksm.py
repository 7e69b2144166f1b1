"""validate ksm: content ids, the page generator, the mixes, KSM's rules by hand, the tolerance,
the run folder, and (as root, with KSM) the smallest mix on the real kernel."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from memvisor import validate_ksm as v

# ---------------------------------------------------------------------------------------------
# Content ids and page bytes


def test_content_ids_follow_the_declared_encoding():
    assert v.ZERO == 0
    assert v.common(0) == 1 << 40
    assert v.common(5) == (1 << 40) | 5
    assert v.unique(3, 7) == (2 << 40) | (3 << 20) | 7
    assert v.duplicate(2, 9) == (3 << 40) | (2 << 20) | 9
    assert [v.kind_of(c) for c in (0, v.common(1), v.unique(0, 1), v.duplicate(0, 1))] == ["zero", "common", "unique", "duplicate"]
    # Distinct processes and kinds never collide.
    ids = {v.unique(p, i) for p in range(4) for i in range(64)} | {v.duplicate(p, i) for p in range(4) for i in range(64)}
    assert len(ids) == 512


@pytest.mark.parametrize("make, args", [(v.common, (1 << 40,)), (v.unique, (1 << 20, 0)), (v.unique, (0, 1 << 20)),
                                        (v.duplicate, (-1, 0)), (v.common, (-1,))])
def test_content_ids_out_of_range_are_refused(make, args):
    with pytest.raises(ValueError):
        make(*args)


def test_an_id_outside_the_encoding_has_no_kind():
    with pytest.raises(ValueError):
        v.kind_of(4 << 40)


def test_page_bytes():
    assert v.page_bytes(0) == bytes(4096)
    p = v.page_bytes(v.common(3))
    assert len(p) == 4096
    cid = v.common(3)
    # Vigna's splitmix64 of (id << 9) | i, word by word (written out here to check the engine's).
    def splitmix64(x):
        m = (1 << 64) - 1
        z = (x + 0x9E3779B97F4A7C15) & m
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        return z ^ (z >> 31)

    assert splitmix64(0) == 0xE220A8397B1DCDAF
    assert int.from_bytes(p[:8], "little") == splitmix64(cid << 9)
    assert int.from_bytes(p[8 * 511:], "little") == splitmix64((cid << 9) | 511)
    assert v.page_bytes(v.common(3)) != v.page_bytes(v.common(4))


# ---------------------------------------------------------------------------------------------
# ksmpages.c


@pytest.fixture(scope="module")
def ksmpages(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    return v.compile_program(tmp_path_factory.mktemp("ksmpages"))


def _region(pid: int, pages: int) -> tuple[int, int]:
    """The program's mergeable region (VmFlags mg), from /proc/PID/smaps."""
    start = None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if m:
            start, end = int(m.group(1), 16), int(m.group(2), 16)
        elif line.startswith("VmFlags:") and " mg" in line and end - start == pages * 4096:
            assert " nh" in line, "MADV_NOHUGEPAGE missing"
            return start, end
    raise AssertionError("no mergeable region of the right size")


def test_ksmpages_writes_every_page_from_its_id(ksmpages, tmp_path):
    ids = [v.ZERO, v.common(1), v.unique(0, 2), v.duplicate(1, 3), v.common(1), v.ZERO]
    f = tmp_path / "ids.bin"
    v.write_ids(f, ids)
    p = subprocess.Popen([str(ksmpages), str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"ready\n"
        start, _ = _region(p.pid, len(ids))
        try:
            with open(f"/proc/{p.pid}/mem", "rb") as mem:
                mem.seek(start)
                data = mem.read(len(ids) * 4096)
        except OSError as e:
            pytest.skip(f"cannot read the program's memory: {e}")
        for i, cid in enumerate(ids):
            assert data[i * 4096:(i + 1) * 4096] == v.page_bytes(cid), f"page {i} (id {cid:#x})"
    finally:
        p.kill()
        p.wait()
        p.stdout.close()
        p.stderr.close()


@pytest.mark.parametrize("content", [None, b"", b"abc"])
def test_ksmpages_refuses_bad_input_with_status_2(ksmpages, tmp_path, content):
    args = [str(ksmpages)]
    if content is None:
        args.append(str(tmp_path / "missing.bin"))
    else:
        (tmp_path / "ids.bin").write_bytes(content)
        args.append(str(tmp_path / "ids.bin"))
    r = subprocess.run(args, capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert r.stderr.startswith("ksmpages: ")
    assert subprocess.run([str(ksmpages)], capture_output=True, timeout=10).returncode == 2


# ---------------------------------------------------------------------------------------------
# Mixes


def test_the_mixes_have_their_declared_shapes():
    assert set(v.MIXES) == {"zero", "image", "chains", "mixed-sizes"}
    zero = v.MIXES["zero"].processes()
    assert [len(p) for p in zero] == [4096, 4096] and all(c == 0 for p in zero for c in p)

    image = v.MIXES["image"].processes()
    assert [len(p) for p in image] == [4096] * 4
    for p, ids in enumerate(image):
        assert all(c == 0 for c in ids[:1024])
        assert all(v.kind_of(c) == "common" and c - v.common(0) < v.IMAGE_POOL for c in ids[1024:3072])
        assert ids[3072:] == [v.unique(p, i) for i in range(3072, 4096)]

    (chains,) = v.MIXES["chains"].processes()
    assert chains[:1000] == [v.duplicate(0, 0)] * 1000 and len(set(chains[1000:])) == 24 == len(chains) - 1000

    mixed = v.MIXES["mixed-sizes"].processes()
    assert [len(p) for p in mixed] == [1024, 2048, 3072]
    assert sum(c == 0 for p in mixed for c in p) == 257
    assert [p[: len(p) // 2] for p in mixed] == [[v.common(j) for j in range(n // 2)] for n in (1024, 2048, 3072)]
    for ids in v.MIXES["mixed-sizes"].processes() + image + [chains]:
        for c in ids:
            v.kind_of(c)
    # Small enough for three full scans in well under a minute at the scan rate the run sets.
    assert max(m.pages for m in v.MIXES.values()) <= 16384


# ---------------------------------------------------------------------------------------------
# The tolerance


@pytest.mark.parametrize("kernel, sim, ok", [
    (0, 0, True), (0, 1, False), (99, 99, True), (99, 100, False), (50, 49, False),
    (100, 101, True), (100, 99, True), (100, 102, False), (1000, 1010, True), (1000, 989, False),
    (4096, None, False),
])
def test_within_one_percent_and_exact_below_100(kernel, sim, ok):
    assert v.within_tolerance(kernel, sim) is ok


def test_compare_rows():
    kernel = {"pages_shared": 200, "pages_sharing": 10_000, "pages_unshared": 24, "pages_volatile": 0, "ksm_zero_pages": 0,
              "stable_node_chains": 1, "stable_node_dups": 4, "full_scans": 3, "pages_scanned": 3072, "general_profit": 5, "wall_s": 1.0}
    sim = dict(kernel, pages_sharing=10_100, pages_unshared=25, stable_node_dups=None)
    del sim["general_profit"]
    rows = {r["counter"]: r for r in v.compare(kernel, sim)}
    assert list(rows) == list(v.COMPARED)  # general_profit only when both have it; wall_s never
    assert rows["pages_sharing"]["within_1pct"] and rows["pages_sharing"]["relative_difference"] == pytest.approx(0.01)
    assert not rows["pages_unshared"]["within_1pct"] and rows["pages_unshared"]["difference"] == 1
    assert not rows["stable_node_dups"]["within_1pct"] and rows["stable_node_dups"]["simulated"] is None
    assert rows["pages_volatile"]["relative_difference"] is None and rows["pages_volatile"]["within_1pct"]


# ---------------------------------------------------------------------------------------------
# KSM's rules by hand


def test_smart_scan_processes_visits_0_1_2_3_5_8_13_22():
    seen = v.processed_visits(32, True)
    assert [i for i, p in enumerate(seen) if p] == [0, 1, 2, 3, 5, 8, 13, 22, 31]
    assert all(v.processed_visits(10, False))


def test_expected_chains_mix():
    e = v.expected("chains", v.DEFAULT_SETTINGS)
    # 1,000 identical pages at max_page_sharing 256: KSM pages of 256, 256, 256 and 232 mappings,
    # chained (one chain, four dups); the 24 unique pages stay in the unstable tree.
    assert (e["pages_shared"], e["pages_sharing"], e["pages_unshared"], e["pages_volatile"]) == (4, 996, 24, 0)
    assert (e["stable_node_chains"], e["stable_node_dups"], e["full_scans"], e["pages_scanned"]) == (1, 4, 3, 3072)
    assert e["general_profit"] == 996 * 4096 - 1024 * 64
    # Zero pages play no part in it.
    assert v.expected("chains", {**v.DEFAULT_SETTINGS, "use_zero_pages": 1}) == e


def test_expected_zero_pages_with_and_without_the_zero_page():
    off = v.expected("zero", v.DEFAULT_SETTINGS)
    assert (off["pages_shared"], off["pages_sharing"], off["stable_node_chains"], off["stable_node_dups"]) == (32, 8160, 1, 32)
    assert off["ksm_zero_pages"] == 0 and off["full_scans"] == 3
    on_settings = {**v.DEFAULT_SETTINGS, "use_zero_pages": 1}
    on = v.expected("zero", on_settings)
    assert (on["pages_shared"], on["pages_sharing"], on["ksm_zero_pages"], on["pages_volatile"]) == (0, 0, 8192, 0)
    # Merged into the zero page on v1, their rmap_items are volatile until v2 frees them: it takes a
    # fourth scan to see nothing change.
    assert v.expected("zero", on_settings, 2)["pages_volatile"] == 8192
    assert on["full_scans"] == 4 and on["pages_scanned"] == 2 * 8192


def test_expected_groups_of_one_more_than_max_page_sharing_leave_one_page_unshared():
    e = v.expected([[v.common(0)] * 257, [v.common(1)] * 2], {**v.DEFAULT_SETTINGS, "max_page_sharing": 256})
    assert (e["pages_shared"], e["pages_sharing"], e["pages_unshared"], e["stable_node_chains"]) == (2, 256, 1, 0)
    e2 = v.expected([[v.common(0)] * 7], {**v.DEFAULT_SETTINGS, "max_page_sharing": 2})
    assert (e2["pages_shared"], e2["pages_sharing"], e2["pages_unshared"], e2["stable_node_chains"], e2["stable_node_dups"]) == (3, 3, 1, 1, 3)


def test_expected_image_and_mixed_sizes():
    image = v.expected("image", v.DEFAULT_SETTINGS)
    counts = {}
    for p in v.MIXES["image"].processes():
        for c in p[1024:3072]:
            counts[c] = counts.get(c, 0) + 1
    singles = sum(1 for g in counts.values() if g == 1)
    assert image["pages_shared"] == 16 + len(counts) - singles  # 4,096 zero pages: 16 KSM pages of 256
    assert image["pages_unshared"] == 4 * 1024 + singles
    assert image["pages_shared"] + image["pages_sharing"] + image["pages_unshared"] == 16384
    mixed = v.expected("mixed-sizes", v.DEFAULT_SETTINGS)
    # common 0-511 x3 and 512-1,023 x2: 1,024 KSM pages; 24 duplicates; 257 zero pages: 1 KSM page + 1 left
    assert mixed["pages_shared"] == 1024 + 24 + 1
    assert mixed["pages_unshared"] == 512 + (192 + 384 + 703) + 1
    assert v.expected("mixed-sizes", {**v.DEFAULT_SETTINGS, "use_zero_pages": 1})["ksm_zero_pages"] == 257


def test_expected_with_smart_scan_alternates_unshared_and_volatile():
    st = v.DEFAULT_SETTINGS
    seq = [v.expected("chains", st, k)["pages_unshared"] for k in range(1, 15)]
    # After 1 scan: nothing; after visits 1, 2, 3, 5, 8, 13 (0-based) processed: unshared.
    assert seq == [0, 24, 24, 24, 0, 24, 0, 0, 24, 0, 0, 0, 0, 24]
    assert v.expected("chains", st, 12)["pages_skipped"] == 24 * 6
    assert v.expected("chains", {**st, "smart_scan": 0}, 12)["pages_unshared"] == 24


def test_nothing_merges_before_the_second_visit():
    e = v.expected("image", v.DEFAULT_SETTINGS, 1)
    assert e["pages_volatile"] == 16384 and e["pages_shared"] == e["pages_sharing"] == e["pages_unshared"] == 0


# ---------------------------------------------------------------------------------------------
# The simulated side's call


def test_simulate_calls_the_engine_with_the_mix_and_settings(monkeypatch):
    from memvisor import _core

    calls = []

    def stub(processes, settings):
        calls.append((processes, settings))
        return {c: 1 for c in v.COMPARED}

    monkeypatch.setattr(_core, "ksm_scan", stub, raising=False)
    out = v.simulate("chains", {"use_zero_pages": 1, "full_scans": 5, "pages_to_scan": 1025, "sleep_millisecs": 50})
    assert out == {c: 1 for c in v.COMPARED}
    (procs, settings), = calls
    assert procs == v.MIXES["chains"].processes()
    assert settings == {"pages_to_scan": 1025, "sleep_millisecs": 50, "max_page_sharing": 256, "use_zero_pages": 1, "smart_scan": 1, "full_scans": 5}


@pytest.mark.parametrize("mix", list(v.MIXES))
def test_the_simulated_scanner_counts_as_ksms_rules_say(mix):
    """The engine's scanner (a mechanism: trees, chains, checksums, skips) against the rules done
    by hand, over the settings validate ksm can meet and scan counts up to smart scan's skips."""
    for uzp in (0, 1):
        for mps in (2, 3, 256, 1000):
            for smart in (0, 1):
                for k in (1, 2, 3, 4, 9, 14):
                    s = {"use_zero_pages": uzp, "max_page_sharing": mps, "smart_scan": smart, "full_scans": k}
                    exp = v.expected(mix, s, k)
                    sim = v.simulate(mix, s)
                    assert {c: sim[c] for c in exp if c in sim} == {c: exp[c] for c in exp if c in sim}, s


# ---------------------------------------------------------------------------------------------
# Settings, refusals and the run folder (no root needed)


def _fake_ksm(tmp_path: Path, **values) -> Path:
    d = tmp_path / "ksm"
    d.mkdir()
    files = {"run": "0", "pages_to_scan": "100", "sleep_millisecs": "20", "max_page_sharing": "256", "use_zero_pages": "0",
             "smart_scan": "1", "merge_across_nodes": "1", "advisor_mode": "[none] scan-time", **values}
    for name, val in files.items():
        (d / name).write_text(val + "\n")
    for name in v.COMPARED + v.KERNEL_ONLY:
        (d / name).write_text("0\n")
    return d


def test_settings_are_put_back_exactly_with_run_last(tmp_path, monkeypatch):
    d = _fake_ksm(tmp_path)
    ksm = v.KsmSettings(d)
    ksm.set("pages_to_scan", 5000)
    ksm.set("run", 1)
    ksm.set("max_page_sharing", 256)  # already so: not written, nothing to restore
    ksm.set("smart_scan", 0)
    with pytest.raises(ValueError):
        ksm.set("merge_across_nodes", 0)
    writes = []
    real = Path.write_text
    monkeypatch.setattr(Path, "write_text", lambda self, text, *a, **k: (writes.append(self.name), real(self, text, *a, **k))[1])
    assert ksm.restore() == []
    assert writes == ["smart_scan", "pages_to_scan", "run"]
    assert {n: (d / n).read_text().strip() for n in ("pages_to_scan", "run", "smart_scan", "max_page_sharing", "merge_across_nodes")} == \
        {"pages_to_scan": "100", "run": "0", "smart_scan": "1", "max_page_sharing": "256", "merge_across_nodes": "1"}


def test_a_running_ksm_is_refused_and_left_alone(tmp_path):
    d = _fake_ksm(tmp_path, run="1")
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "cgroup.controllers").write_text("cpu memory\n")
    before = {p.name: p.read_text() for p in d.iterdir()}
    with pytest.raises(v.ValidationError, match="KSM is running"):
        v.run_kernel("chains", v.DEFAULT_SETTINGS, ksm_dir=d, cgroup_root=cg, exe=Path("/nonexistent"))
    assert {p.name: p.read_text() for p in d.iterdir()} == before
    assert [p.name for p in cg.iterdir()] == ["cgroup.controllers"]


def test_missing_prerequisites_are_sentences(tmp_path):
    missing = v.missing_prerequisites(cgroup_root=tmp_path, ksm_dir=tmp_path / "no-ksm")
    assert any("KSM in the kernel" in m for m in missing)
    assert any(m.startswith("a memory cgroup controller") for m in missing)
    if os.geteuid() != 0:
        assert any(m.startswith("root privileges") for m in missing)
    old = _fake_ksm(tmp_path)
    (old / "smart_scan").unlink()
    assert any("6.7 or later" in m and "smart_scan" in m for m in v.missing_prerequisites(cgroup_root=tmp_path, ksm_dir=old))


def _fake_kernel(mix, settings, **kw):
    e = v.expected(mix, settings)
    return {**e, "ksm_settings_used": {"pages_to_scan": v.MIXES[mix].pages + 1, "sleep_millisecs": 50, **settings},
            "wall_s": 0.1, "cgroup_version": 2, "per_process": [], "scans": [e]}


def test_run_validation_writes_the_folder_only_when_complete(tmp_path, monkeypatch):
    monkeypatch.setattr(v, "run_kernel", _fake_kernel)
    monkeypatch.setattr(v, "compile_program", lambda work: Path(work) / "ksmpages")
    monkeypatch.setattr(v, "ksm_settings", lambda *a: {"run": "0"})
    sims = []

    def sim(mix, st):
        sims.append(st)
        return v.expected(mix, st, st["full_scans"])

    out = v.run_validation(tmp_path / "r", ["chains", "zero"], simulator=sim, log=lambda _: None)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["target_met"] and summary["expected_equals_kernel"]
    assert [(r["mix"], r["settings"]["use_zero_pages"]) for r in summary["runs"]] == [("chains", 0), ("chains", 1), ("zero", 0), ("zero", 1)]
    assert sims[0] == {**v.DEFAULT_SETTINGS, "pages_to_scan": 1025, "sleep_millisecs": 50, "full_scans": 3}
    md = (out / "results.md").read_text()
    assert "| pages_sharing | 996 | 996 | 996 | 0 | +0.00% | yes |" in md
    assert md.count("| general_profit |") == 4

    # A simulator off by 2 % fails the target; one that fails leaves no folder at all.
    out2 = v.run_validation(tmp_path / "r2", ["zero"], simulator=lambda m, st: {**v.expected(m, st, st["full_scans"]), "pages_sharing": 8000},
                            log=lambda _: None)
    assert not json.loads((out2 / "summary.json").read_text())["target_met"]

    def broken(mix, st):
        if sims:
            raise KeyboardInterrupt
        sims.append(st)
        return v.expected(mix, st, st["full_scans"])

    sims.clear()
    with pytest.raises(KeyboardInterrupt):
        v.run_validation(tmp_path / "r3", ["chains"], simulator=broken, log=lambda _: None)
    assert not any(p.name.startswith((".r3", "r3")) for p in tmp_path.iterdir())


def test_an_unknown_mix_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="sawtooth"):
        v.run_validation(tmp_path / "r", ["sawtooth"])
    assert not (tmp_path / "r").exists()


def test_a_mix_given_twice_is_refused_before_anything_runs(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from memvisor import cli

    # Were it accepted, the validation would stop at these, not touch the machine's KSM.
    monkeypatch.setattr(v, "missing_prerequisites", lambda: ["(test) nothing"])
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli.main, ["validate", "ksm", "--mixes", "zero,image,zero", "--out", "v"])
    assert r.exit_code == 2 and "--mixes: zero given more than once" in r.output, r.output
    assert not (tmp_path / "v").exists()


# ---------------------------------------------------------------------------------------------
# The real kernel


def _kernel_missing() -> list[str]:
    return v.missing_prerequisites()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_the_kernel_counts_the_chains_mix_as_ksms_rules_say():
    missing = _kernel_missing()
    if missing:
        pytest.skip("; ".join(missing))
    before = v.ksm_settings()
    try:
        k = v.run_kernel("chains", v.DEFAULT_SETTINGS, timeout_s=60)
    except v.ValidationError as e:
        if "someone else is using it" in str(e) or "other processes" in str(e):
            pytest.skip(str(e))
        raise
    assert v.ksm_settings() == before
    e = v.expected("chains", v.DEFAULT_SETTINGS, k["full_scans"])
    assert {c: k[c] for c in v.COMPARED + v.KERNEL_ONLY} == {c: e[c] for c in v.COMPARED + v.KERNEL_ONLY}
    assert k["full_scans"] == v.settle_scans("chains", v.DEFAULT_SETTINGS)
    sim = v.simulate("chains", {**v.DEFAULT_SETTINGS, "full_scans": k["full_scans"]})
    assert {c: sim[c] for c in v.COMPARED} == {c: k[c] for c in v.COMPARED}, "the simulated scanner counts as the kernel did"
    cg_root, _ = v.find_memory_cgroup_root(Path("/sys/fs/cgroup"))
    assert not (cg_root / f"memvisor-validate-ksm-{os.getpid()}").exists()
