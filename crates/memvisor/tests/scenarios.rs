//! Scenario files: bad input gets one clear, located error; resolved scenarios reload to the same
//! thing; the same scenario and seed give the same results, bit for bit.

mod common;

use common::one_guest;
use memvisor::scenario::{self, CASES, Scenario};

fn load_err(text: &str) -> String {
    match scenario::load(text, "bad.toml", &[]) {
        Ok(_) => panic!("accepted bad input:\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn base(vm_extra: &str) -> String {
    one_guest("4GiB", &format!("name = \"g\"\nmemory = \"1GiB\"\nworkload = {{ kind = \"stress\", passes = 1 }}\n{vm_extra}"), "")
}

#[test]
fn malformed_toml_names_the_line() {
    let e = load_err("name = \"x\"\n[host\nmemory = \"1GiB\"\n");
    assert!(e.starts_with("bad.toml:2:"), "{e}");
}

#[test]
fn unknown_field_is_named_with_what_is_allowed() {
    let e = load_err(&base("colour = \"blue\""));
    assert!(e.contains("bad.toml:") && e.contains("colour") && e.contains("expected one of"), "{e}");
}

#[test]
fn an_integer_past_64_bits_is_refused_with_the_range() {
    // In the file (TOML hands it over as i128) and through --set (as u64): the same words.
    let e = load_err(&format!("seed = 18446744073709551616\n{}", base("")));
    assert!(
        e.starts_with("bad.toml:1:")
            && e.contains("seed: 18446744073709551616 is out of range: integers here are at most 9223372036854775807"),
        "{e}"
    );
    let e = scenario::load(&base(""), "ok.toml", &["seed=9223372036854775808".into()]).expect_err("refused").to_string();
    assert!(e.contains("seed") && e.contains("9223372036854775808 is out of range: integers here are at most 9223372036854775807"), "{e}");
}

#[test]
fn unitless_and_negative_sizes_are_refused() {
    let e = load_err(&base("").replace("\"1GiB\"", "1024"));
    assert!(e.contains("vm.g.memory") && e.contains("no unit") && e.contains("GiB"), "{e}");
    let e = load_err(&base("").replace("\"1GiB\"", "\"-1GiB\""));
    assert!(e.contains("negative"), "{e}");
    let line = base("").lines().position(|l| l.starts_with("memory = \"1GiB\"")).unwrap() + 1;
    assert!(e.starts_with(&format!("bad.toml:{line}:")), "{e} should point at line {line}");
}

#[test]
fn esx_settings_under_another_policy_are_said_to_be_ignored() {
    let host = |extra: &str| {
        one_guest("4GiB", "name = \"g\"\nmemory = \"1GiB\"\nworkload = { kind = \"stress\", passes = 1 }\n", "").replacen(
            "[host]\n",
            &format!("[host]\n{extra}"),
            1,
        )
    };
    let load = |text: &str| scenario::load(text, "t.toml", &[]).unwrap().remove(0);
    let s = load(&host("policy = \"mom\"\nidle_tax = 50\n"));
    assert_eq!(s.warnings, ["host.idle_tax is the esx policy's, and host.policy is 'mom': it is ignored"]);
    let s = load(&host("esx_states = \"minfree6\"\n"));
    assert_eq!(s.warnings, ["host.esx_states is the esx policy's, and host.policy is 'static': it is ignored"]);
    // The resolved scenario leaves them out, so it reloads without the warning.
    assert!(!s.to_toml().contains("esx_states") && load(&s.to_toml()).warnings.is_empty(), "{}", s.to_toml());
    // Under the esx policy both are taken and written back.
    let s = load(&host("policy = \"esx\"\nidle_tax = 50\n"));
    assert!(s.warnings.is_empty() && s.to_toml().contains("idle_tax = 50"), "{}", s.to_toml());
    // A case whose variant sets the state table still runs under another policy, every variant.
    let text = CASES.iter().find(|c| c.0 == "tps-evaporates").unwrap().2;
    let runs = scenario::load(text, "tps-evaporates", &["host.policy=mom".into()]).unwrap();
    assert!(runs.iter().any(|s| s.warnings.iter().any(|w| w.starts_with("host.esx_states"))), "the variant that sets it is told");
    // A VM's limit and shares: kept by some policies, said to be ignored by the others, and
    // written back only where set, so that a reload under those says nothing the user did not write.
    let vm = |policy: &str, extra: &str| {
        host(&format!("policy = \"{policy}\"\n")).replace("memory = \"1GiB\"\n", &format!("memory = \"1GiB\"\n{extra}"))
    };
    let s = load(&vm("mom", "limit = \"512MiB\"\nshares = 7\n"));
    assert_eq!(
        s.warnings,
        [
            "vm.g.limit is kept by the static and esx policies, and host.policy is 'mom': it is ignored",
            "vm.g.shares weigh in the esx and proxmox policies, and host.policy is 'mom': they are ignored"
        ]
    );
    let s = load(&vm("esx", "limit = \"512MiB\"\nshares = 7\n"));
    assert!(s.warnings.is_empty() && s.to_toml().contains("limit = \"512MiB\"") && s.to_toml().contains("shares = 7"), "{}", s.to_toml());
    let s = load(&vm("mom", ""));
    assert!(s.warnings.is_empty() && load(&s.to_toml()).warnings.is_empty(), "{}", s.to_toml());
    assert_eq!(load(&s.to_toml()).vms[0].shares, 10 * 1024, "the default shares come back on reload");
}

#[test]
fn a_time_series_too_large_to_keep_is_refused_before_the_run() {
    let e = load_err(&base("").replacen("sample_interval = \"1s\"", "sample_interval = \"1ns\"", 1));
    assert!(e.contains("host.sample_interval") && e.contains("at least 1ms"), "{e}");
    let e = load_err(&base("").replacen("name = \"t\"", "name = \"t\"\nduration = \"876000h\"", 1));
    assert!(e.contains("host.sample_interval") && e.contains("time-series rows, more than the 5000000 kept in memory"), "{e}");
    // The Denali host keeps 9 rows a sample whatever its VMs: 10,000 of them for 100 hours at
    // 10 minutes is 601 samples, not 6 million rows.
    let text = memvisor::scenario::case_text("denali-scale").expect("a case");
    let sets = ["duration=100h", "host.sample_interval=10min", "vm.web.count=10000"];
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    scenario::load(text, "ok.toml", &sets).unwrap_or_else(|e| panic!("{e}"));
    let e = load_set_err(text, "duration=876000h");
    assert!(e.contains("rows (the most popular VMs and all together) sampled every 10 s"), "{e}");
}

#[test]
fn names_that_would_leave_the_run_folder_are_refused() {
    for bad in ["..", ".hidden", "a/b", "a\\\\b", "   "] {
        let e = load_err(&base("").replacen("name = \"t\"", &format!("name = \"{bad}\""), 1));
        assert!(e.contains("name: must be a name of 1 to 100 bytes"), "{bad}: {e}");
        let e = load_err(&format!("{}[[variant]]\nname = \"{bad}\"\nset = {{ seed = 2 }}\n", base("")));
        assert!(e.contains("variant.name") && e.contains("not starting with '.'"), "{bad}: {e}");
    }
    let e = load_err(&base("").replacen("name = \"t\"", &format!("name = \"{}\"", "x".repeat(101)), 1));
    assert!(e.contains("1 to 100 bytes"), "{e}");
    // A variant's folder would take the place of the run folder's own files.
    for file in ["summary.json", "report.html"] {
        let e = load_err(&format!("{}[[variant]]\nname = \"{file}\"\nset = {{ seed = 2 }}\n", base("")));
        assert!(e.contains("variant.name") && e.contains(&format!("'{file}' is a file of the run folder")), "{e}");
    }
}

#[test]
fn a_vm_may_not_take_a_name_the_decisions_log_gives_to_others() {
    for bad in ["host", "#1"] {
        let e = load_err(&base("").replacen("name = \"g\"", &format!("name = \"{bad}\""), 1));
        assert!(e.contains("vm.name") && e.contains(&format!("'{bad}' is the decisions log's name")), "{bad}: {e}");
    }
    assert!(scenario::load(&base("").replacen("name = \"g\"", "name = \"hosts\"", 1), "ok.toml", &[]).is_ok());
}

#[test]
fn reservation_above_memory_is_refused() {
    let e = load_err(&base("reservation = \"2GiB\""));
    assert!(e.contains("vm.g.reservation") && e.contains("above the VM's memory"), "{e}");
}

#[test]
fn a_guest_too_small_for_its_kernel_is_refused_in_plain_sizes() {
    let e = load_err(&base("").replace("\"1GiB\"", "\"64MiB\""));
    assert!(
        e.contains("vm.g.kernel_reserved") && e.contains("of 69.5 MiB (the default for its size)") && e.contains("in a 64 MiB guest"),
        "{e}"
    );
    assert!(e.contains("set kernel_reserved"), "{e}");
}

#[test]
fn reservations_above_the_host_are_refused_by_admission_control() {
    let text = one_guest(
        "2GiB",
        "name = \"g\"\nmemory = \"1GiB\"\nreservation = \"1GiB\"\ncount = 2\nworkload = { kind = \"stress\", passes = 1 }",
        "",
    );
    let s = scenario::load(&text, "ok.toml", &[]).unwrap();
    let e = memvisor::Simulation::new(&s[0]).err().expect("admission must refuse");
    assert!(e.contains("admission control refuses to power on VM 'g-2'"), "{e}");
}

#[test]
fn boot_reservations_past_the_host_are_refused_before_any_page_state_is_built() {
    let boot_err = |text: String| {
        let s = scenario::load(&text, "ok.toml", &[]).unwrap_or_else(|e| panic!("{e}")).remove(0);
        memvisor::Simulation::new(&s).err().expect("cannot boot")
    };
    // The third guest's kernel reservation no longer fits.
    let e = boot_err(base("kernel_reserved = \"900MiB\"\ncount = 3").replace("\"4GiB\"", "\"2GiB\""));
    assert!(e.contains("VM 'g-3' cannot boot") && e.contains("of 900 MiB") && e.contains("after the 2 VMs before it"), "{e}");
    // A maxmem whose memmap alone outgrows the host (1 TiB: 16 GiB of descriptors) fails at
    // once, not after gigabytes of the simulator's own page state: its reservation does not fit in
    // the memory the guest starts with, which admission has already fitted in the host.
    let e = load_err(&base("maxmem = \"1TiB\"").replace("memory = \"4GiB\"", "memory = \"2GiB\"\nprofile = \"xen\""));
    assert!(e.contains("vm.g.kernel_reserved: the kernel's boot reservation of 16.1 GiB (the default for its maxmem)"), "{e}");
}

#[test]
fn a_boot_past_the_hosts_free_frames_names_what_holds_them() {
    // Admission passes (no reservations), but the hypervisor, ESX's overhead of the VMs powered on
    // so far and the kernels of those booted before leave too little for the ninth's kernel.
    let text = one_guest(
        "2GiB",
        "name = \"g\"\ncount = 12\nmemory = \"256MiB\"\nworkload = { kind = \"idle\", footprint = \"16MiB\" }",
        "duration = \"2s\"",
    )
    .replacen("[host]\n", "[host]\nprofile = \"esx\"\n", 1);
    let s = scenario::load(&text, "ok.toml", &[]).unwrap_or_else(|e| panic!("{e}")).remove(0);
    let e = memvisor::Simulation::new(&s).err().expect("cannot boot");
    assert!(
        e.contains("exhausted while booting VM 'g-")
            && e.contains("(its kernel_reserved)")
            && e.contains(
                "the hypervisor holds 400 MiB, the overhead of the 9 VMs powered on so far 1018.5 MiB, and the 8 VMs booted before it"
            ),
        "{e}"
    );
}

#[test]
fn a_first_vm_that_cannot_boot_is_told_so_in_the_singular() {
    // Its kernel fits the host, but not beside its own overhead.
    let text = one_guest(
        "100MiB",
        "name = \"g\"\nmemory = \"256MiB\"\noverhead = \"60MiB\"\nworkload = { kind = \"idle\", footprint = \"16MiB\" }",
        "duration = \"2s\"",
    );
    let s = scenario::load(&text, "ok.toml", &[]).unwrap_or_else(|e| panic!("{e}")).remove(0);
    let e = memvisor::Simulation::new(&s).err().expect("cannot boot");
    assert!(e.contains("the overhead of the 1 VM powered on so far") && e.contains("and no VM was booted before it (fewer"), "{e}");
}

#[test]
fn a_xen_guest_must_boot_in_the_memory_it_starts_with() {
    let xen = |vm: &str, host: &str| {
        one_guest("2GiB", &format!("name = \"g\"\n{vm}\nworkload = {{ kind = \"idle\", footprint = \"8MiB\" }}\n"), "duration = \"1s\"")
            .replacen("[host]\n", &format!("[host]\nprofile = \"xen\"\n{host}"), 1)
    };
    // The reservation sized for maxmem (its memmap) must fit in `memory`, not merely in maxmem.
    let e = load_err(&xen("memory = \"64MiB\"\nmaxmem = \"1GiB\"", ""));
    assert!(
        e.contains("vm.g.kernel_reserved") && e.contains("(the default for its maxmem) does not fit in the 64 MiB the guest starts with"),
        "{e}"
    );
    // Reservation and min watermark fit, but leave no room for the whole boot balloon: refused at
    // boot, where the guest would otherwise start with more than `memory`.
    let start = |vm: &str| {
        let s = scenario::load(&xen(vm, ""), "ok.toml", &[]).unwrap_or_else(|e| panic!("{e}")).remove(0);
        memvisor::Simulation::new(&s).map(|_| ())
    };
    let e = start("memory = \"16484KiB\"\nmaxmem = \"1GiB\"\nkernel_reserved = \"16MiB\"").expect_err("cannot start");
    assert!(e.contains("VM 'g' cannot start in memory = 16484 KiB") && e.contains("the min watermark (128 KiB) leave room for"), "{e}");
    // The watermarks follow the memory the guest boots in, not maxmem (the balloon's pages are not
    // the buddy allocator's at boot): a PV guest of 128 MiB in 1 GiB, with the default reservation
    // and THP (whose floor over 1 GiB would be 44 MiB), starts.
    start("memory = \"128MiB\"\nmaxmem = \"1GiB\"").unwrap_or_else(|e| panic!("{e}"));
    let s = scenario::load(&xen("memory = \"128MiB\"\nmaxmem = \"1GiB\"", ""), "ok.toml", &[]).unwrap().remove(0);
    assert!(s.vms[0].guest.sysctl.min_free_kbytes.unwrap() < 4096, "{:?}", s.vms[0].guest.sysctl);
    // A boot balloon above the balloon's cap.
    let e = load_err(&xen("memory = \"128MiB\"\nmaxmem = \"256MiB\"", "balloon_max_percent = 10\n"));
    assert!(e.contains("vm.g.maxmem: starts 128 MiB of the VM in its balloon") && e.contains("maximum of 25.6 MiB"), "{e}");
    // Nor below its reservation, which the host never balloons.
    let e = load_err(&xen("memory = \"256MiB\"\nmaxmem = \"1GiB\"\nreservation = \"512MiB\"", ""));
    assert!(e.contains("vm.g.reservation: 512 MiB is more than the 256 MiB the VM starts with"), "{e}");
}

#[test]
fn settings_of_a_mechanism_left_off_are_said_to_be_ignored() {
    let text = |host: &str, vm: &str| {
        one_guest(
            "2GiB",
            &format!("name = \"g\"\nmemory = \"128MiB\"\n{vm}workload = {{ kind = \"idle\", footprint = \"8MiB\" }}\n"),
            "duration = \"1s\"",
        )
        .replacen("[host]\n", &format!("[host]\n{host}"), 1)
    };
    let load = |t: &str| scenario::load(t, "t.toml", &[]).unwrap_or_else(|e| panic!("{e}")).remove(0);
    let s = load(&text("profile = \"xen\"\ncompressor = \"deflate-1\"\n", ""));
    assert_eq!(
        s.warnings,
        ["host.compressor: nothing compresses (host.zip_max_percent is 0 and host.tmem_compress is off): it is ignored"]
    );
    // The default compressor is not said to be ignored: older run folders state it for every host.
    assert!(load(&text("compressor = \"lzo1x-1\"\n", "")).warnings.is_empty());
    let s = load(&text("profile = \"xen\"\ntmem = true\npolicy = \"dmc\"\n", "frontswap_selfshrink = true\n"));
    assert!(s.warnings.iter().any(|w| w.contains("frontswap_selfshrink is the xen-selfballoon driver's")), "{:?}", s.warnings);
    // What the resolved scenario writes back of its own defaults reloads without a warning.
    for host in [
        "profile = \"xen\"\n",
        "profile = \"xen\"\ntmem = true\npolicy = \"dmc\"\n",
        "profile = \"xen\"\ntmem = true\ntmem_compress = true\n",
    ] {
        let s = load(&text(host, ""));
        assert!(s.warnings.is_empty() && load(&s.to_toml()).warnings.is_empty(), "{}", s.to_toml());
        assert_eq!(load(&s.to_toml()), s, "reloads to the same scenario");
    }
    // An ignored choice the user made is written back, and still said on reload.
    let s = load(&text("profile = \"xen\"\ncompressor = \"lz4\"\n", ""));
    assert_eq!(load(&s.to_toml()).warnings, s.warnings);
}

#[test]
fn a_phase_column_no_workload_has_is_said_to_show_nothing() {
    let with = |workload: &str, columns: &str| {
        let text = one_guest("2GiB", &format!("name = \"g\"\nmemory = \"512MiB\"\nworkload = {workload}\n"), "")
            + &format!("[report]\ncolumns = [{columns}]\n");
        scenario::load(&text, "t.toml", &[]).unwrap_or_else(|e| panic!("{e}")).remove(0).warnings
    };
    let stress = "{ kind = \"stress\", passes = 1 }";
    let w = with(stress, "\"runtime_s\", \"write_s\", \"read_KiB/s\"");
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].contains("'write_s'") && w[0].contains("no workload here has a write phase") && w[0].contains("shows -"), "{w:?}");
    assert!(w[1].contains("'read_KiB/s'") && w[1].contains("read phase"), "{w:?}");
    assert!(with("{ kind = \"bonnie\", size = \"64MiB\" }", "\"write_s\", \"rewrite_KiB/s\", \"read_s\"").is_empty());
    // file-io reads back only when told to.
    let fileio = |read: bool| format!("{{ kind = \"file-io\", size = \"64MiB\", read = {read} }}");
    assert!(with(&fileio(true), "\"write_s\", \"read_s\"").is_empty());
    let w = with(&fileio(false), "\"write_s\", \"read_s\"");
    assert!(w.len() == 1 && w[0].contains("'read_s'"), "{w:?}");
}

#[test]
fn unknown_kinds_and_misplaced_fields_say_what_is_allowed() {
    let e = load_err(&base("").replace("kind = \"stress\"", "kind = \"stres\""));
    assert!(e.contains("'stres' is not one of: stress, file-io, idle"), "{e}");
    let e = load_err(&base("").replace("passes = 1", "passes = 1, size = \"1GiB\""));
    assert!(e.contains("a 'stress' workload has no field 'size'"), "{e}");
    let e = load_err(&base("sysctl = { \"vm.swapiness\" = 10 }"));
    assert!(e.contains("unknown sysctl 'vm.swapiness'") && e.contains("vm.swappiness"), "{e}");
    // A value --set puts over the file's is located at the --set, not at the file's valid one.
    let e = scenario::load(&base("sysctl = { \"vm.swappiness\" = 10 }"), "ok.toml", &["vm.g.sysctl.vm.swappiness=500".into()])
        .expect_err("refused")
        .to_string();
    assert!(e.starts_with("--set vm.g.sysctl.vm.swappiness=500: vm.g.sysctl:") && e.contains("out of range"), "{e}");
    // The kernel's own lower bound: a scale factor of 0 would put every watermark at min.
    let e = load_err(&base("sysctl = { \"vm.watermark_scale_factor\" = 0 }"));
    assert!(e.contains("vm.watermark_scale_factor = 0 is out of range 1..=3000"), "{e}");
    let e = load_err(
        &base("").replace("[[datastore]]\nname = \"d\"", "[[datastore]]\nname = \"\"").replace("datastore = \"d\"", "datastore = \"\""),
    );
    assert!(e.contains("datastore.name: must be a non-empty name"), "{e}");
    for (cols, why) in [("[]", "is empty"), ("[\"runtime_s\", \"pgfault\", \"runtime_s\"]", "'runtime_s' is named twice")] {
        let e = load_err(&format!("{}[report]\ncolumns = {cols}\n", base("")));
        assert!(e.contains("report.columns") && e.contains(why), "{e}");
    }
    let e = load_err(&base("").replace("datastore = \"d\"", "datastore = \"nope\""));
    assert!(e.contains("no datastore named 'nope' (have: d)"), "{e}");
    let e = load_err(&base("").replace("device = \"ssd\"", "device = \"ssd\"\ncache = \"1GiB\""));
    assert!(e.contains("'cache' and 'disks' describe the file server behind an nfs datastore; 'd' is ssd"), "{e}");
}

#[test]
fn type_errors_name_the_key_in_plain_words() {
    // The key by its whole path, as --set takes it: a VM by its name, a workload by its kind.
    let e = load_err(&base("vcpus = \"two\""));
    assert!(e.contains(": vm.g.vcpus: invalid type: string \"two\", expected an integer"), "{e}");
    let e = load_err(&base("").replace("passes = 1", "passes = \"x\""));
    assert!(e.contains(": vm.g.workload.stress.passes: ") && e.contains("expected an integer"), "{e}");
    // TOML's words for what was found, not serde's (sequence, map).
    let e = load_err(&base("").replace("datastore = \"d\"", "datastore = [\"d\"]"));
    assert!(e.contains("invalid type: array, expected a string"), "{e}");
    let e = load_err(&base("").replace("datastore = \"d\"", "datastore = { name = \"d\" }"));
    assert!(e.contains("invalid type: table, expected a string"), "{e}");
    let e = load_err(&base("sysctl = { \"vm.swappiness\" = \"x\" }"));
    assert!(e.contains(": vm.g.sysctl.vm.swappiness: invalid type: string \"x\", expected an integer"), "{e}");
    let e = load_err(&base("").replace("[[datastore]]\n", "[[datastore]]\nkind = \"ssd\"\n"));
    assert!(e.contains(": datastore.d.kind: unknown field `kind`"), "{e}");
    let e = scenario::load(&base(""), "ok.toml", &["host=3".into()]).unwrap_err().to_string();
    assert!(e.contains("expected a table") && !e.contains("Raw"), "{e}");
    let e = load_err(&format!("name = \"a\"\n{}", base("")));
    assert!(e.contains(": name: duplicate key"), "{e}");
    let e = load_err(&base("").replacen("sample_interval", "seed = 3\nsample_interval", 1));
    assert!(e.contains("unknown field `seed`") && e.contains("'seed' is a top-level key"), "{e}");
    // A table's field written at the top level is told which table it belongs in.
    let e = load_err(&format!("sample_interval = \"1s\"\n{}", base("").replacen("sample_interval = \"1s\"\n", "", 1)));
    assert!(e.contains("unknown field `sample_interval`") && e.ends_with("; `sample_interval` belongs in [host]"), "{e}");
    let e = load_err(&format!("maxmem = \"1GiB\"\n{}", base("")));
    assert!(e.ends_with("; `maxmem` belongs in [[vm]]"), "{e}");
    let e = load_err(&format!("memory = \"1GiB\"\n{}", base("")));
    assert!(e.ends_with("; `memory` belongs in [host] or [[vm]]"), "{e}");
    // A table of two fields, whose list serde words otherwise; a workload's.
    let e = load_err(&format!("columns = [\"x\"]\n{}", base("")));
    assert!(e.ends_with("; `columns` belongs in [report]"), "{e}");
    let e = load_err(&format!("passes = 3\n{}", base("")));
    assert!(e.ends_with("; `passes` belongs in a [[vm]]'s workload"), "{e}");
    // A name no table has gets none.
    let e = load_err(&format!("colour = 1\n{}", base("")));
    assert!(!e.contains("belongs"), "{e}");
    // A misspelt field is named with the one it most likely means, not every field there is.
    let e = load_err(&base("").replace("passes = 1", "passess = 1"));
    assert!(e.contains("unknown field `passess`; did you mean `passes`?") && !e.contains("expected one of"), "{e}");
    // Two equally close: both named, neither guessed.
    let e = load_err(&base("").replace("passes = 1", "pases = 1"));
    assert!(e.contains("did you mean `pages` or `passes`?"), "{e}");
    // Two letters swapped are one slip.
    let e = load_err(&base("").replace("memory = \"1GiB\"", "memroy = \"1GiB\""));
    assert!(e.contains("unknown field `memroy`; did you mean `memory`?"), "{e}");
    // A name close to none keeps the list.
    let e = load_err(&base("").replace("passes = 1", "colour = 1"));
    assert!(e.contains("unknown field `colour`, expected one of"), "{e}");
}

#[test]
fn impossible_workload_settings_are_refused_and_late_ones_said() {
    let idle = |w: &str| {
        one_guest("4GiB", &format!("name = \"g\"\nmemory = \"1GiB\"\nworkload = {{ kind = \"idle\", {w} }}"), "duration = \"10s\"")
    };
    let e = load_err(&idle("footprint = \"64MiB\", active = \"128MiB\", period = \"1s\""));
    assert!(e.contains("vm.g.workload.idle.active") && e.contains("larger than the footprint"), "{e}");
    let late = scenario::load(&idle("footprint = \"64MiB\", start = \"10s\""), "ok.toml", &[]).unwrap();
    assert!(
        late[0].warnings.iter().any(|w| w.contains("starts workload 'idle' at 10 s, not before the run ends at 10 s")),
        "{:?}",
        late[0].warnings
    );
    assert!(scenario::load(&idle("footprint = \"64MiB\", active = \"64MiB\", period = \"1s\", start = \"9s\""), "ok.toml", &[]).is_ok());
    // Work of nothing is a mistake, not a workload that ends at once (or spins doing nothing).
    let wl = |w: &str| one_guest("4GiB", &format!("name = \"g\"\nmemory = \"1GiB\"\nworkload = {{ {w} }}"), "duration = \"10s\"");
    for (w, field, why) in [
        ("kind = \"stress-vm\", bytes = \"0B\"", "vm.g.workload.stress-vm.bytes", "at least one page"),
        ("kind = \"stress\", passes = 1, name = \" \"", "vm.g.workload.stress.name", "must be a non-empty name"),
    ] {
        let e = load_err(&wl(w));
        assert!(e.contains(field) && e.contains(why), "{w}: {e}");
    }
}

#[test]
fn overrides_are_located() {
    let e = scenario::load(&base(""), "ok.toml", &["vm.g.memory=-3GiB".into()]).unwrap_err().to_string();
    assert!(e.starts_with("--set vm.g.memory=-3GiB") && e.contains("negative"), "{e}");
    let e = scenario::load(&base(""), "ok.toml", &["vm.h.memory=3GiB".into()]).unwrap_err().to_string();
    assert!(e.contains("no 'vm' entry named 'h' (have: g; or by index 0)"), "{e}");
    let s = scenario::load(&base(""), "ok.toml", &["vm.g.memory=3GiB".into(), "vm.g.sysctl.vm.swappiness=7".into()]).unwrap();
    assert_eq!(s[0].vms[0].guest.memory_pages, 3 << 18);
    assert_eq!(s[0].vms[0].guest.sysctl.swappiness, 7);
    // A single `workload = {...}` is picked by index, kind or name alike.
    for key in ["vm.g.workload.0.passes=3", "vm.g.workload.stress.passes=3", "vm.g.workload.passes=3"] {
        let s = scenario::load(&base(""), "ok.toml", &[key.into()]).unwrap();
        assert!(s[0].to_toml().contains("passes = 3"), "{key} did not reach the workload");
    }
    let e = scenario::load(&base(""), "ok.toml", &["vm.g.workload.1.passes=3".into()]).unwrap_err().to_string();
    assert!(e.contains("no 'workload' entry named '1' (have: stress; or by index 0)"), "{e}");
    // A kind the VM does not run, followed by its field, names the entries, not serde's field list.
    let e = scenario::load(&base(""), "ok.toml", &["vm.g.workload.random.touches=3".into()]).unwrap_err().to_string();
    assert!(e.contains("no 'workload' entry named 'random' (have: stress; or by index 0)"), "{e}");
}

#[test]
fn an_override_selector_picks_by_name_before_index_and_refuses_what_fits_several() {
    // VMs named "1" and "0": `vm.1` is the VM named "1", not the second entry.
    let two = base("").replace("name = \"g\"", "name = \"1\"")
        + "\n[[vm]]\ndatastore = \"d\"\nname = \"0\"\nmemory = \"1GiB\"\nworkload = { kind = \"stress\", passes = 1 }\n";
    let s = scenario::load(&two, "ok.toml", &["vm.1.memory=2GiB".into()]).unwrap();
    let memory = |name: &str| s[0].vms.iter().find(|v| v.guest.name == name).unwrap().guest.memory_pages;
    assert_eq!((memory("1"), memory("0")), (2 << 18, 1 << 18));
    // Two unnamed workloads of one kind: the kind fits both, an index picks one.
    let w = "workload = [{ kind = \"stress\", passes = 1 }, { kind = \"stress\", passes = 2 }]";
    let twice = one_guest("4GiB", &format!("name = \"g\"\nmemory = \"1GiB\"\n{w}"), "");
    let e = scenario::load(&twice, "ok.toml", &["vm.g.workload.stress.passes=7".into()]).unwrap_err().to_string();
    assert!(e.contains("'stress' fits 2 'workload' entries (indices 0, 1): pick one by index"), "{e}");
    let s = scenario::load(&twice, "ok.toml", &["vm.g.workload.1.passes=7".into()]).unwrap();
    assert!(s[0].to_toml().contains("passes = 7") && s[0].to_toml().contains("passes = 1"), "{}", s[0].to_toml());
    // A stress workload named "random" beside an unnamed random one: both go by "random".
    let w = "workload = [{ kind = \"stress\", name = \"random\", passes = 1 }, { kind = \"random\", pages = 16, touches = 10 }]";
    let clash = one_guest("4GiB", &format!("name = \"g\"\nmemory = \"1GiB\"\n{w}"), "");
    let e = scenario::load(&clash, "ok.toml", &["vm.g.workload.random.pages=20".into()]).unwrap_err().to_string();
    assert!(e.contains("'random' fits 2 'workload' entries"), "{e}");
}

#[test]
fn a_scenario_without_datastores_is_told_to_add_one() {
    let text = "name = \"t\"\n[host]\nmemory = \"4GiB\"\n[[vm]]\nname = \"g\"\nmemory = \"1GiB\"\ndatastore = \"d\"\nworkload = { kind = \"stress\", passes = 1 }\n";
    let e = load_err(text);
    assert!(e.contains("no datastore named 'd' (the scenario has no [[datastore]]: add one"), "{e}");
}

#[test]
fn a_count_of_zero_that_leaves_no_vm_is_blamed_on_the_count() {
    let e = scenario::load(&base(""), "ok.toml", &["vm.g.count=0".into()]).unwrap_err().to_string();
    assert!(e.starts_with("--set vm.g.count=0: vm.g.count: every [[vm]] has count = 0"), "{e}");
}

#[test]
fn what_the_run_will_not_reach_is_said_as_a_warning() {
    let text = one_guest(
        "4GiB",
        "name = \"g\"\nmemory = \"1GiB\"\nworkload = { kind = \"stress\", passes = 1, start = \"200s\" }\n",
        "duration = \"120s\"\n[report]\nwindow = [\"0s\", \"500s\"]",
    );
    let s = scenario::load(&text, "ok.toml", &[]).unwrap().remove(0);
    assert!(
        s.warnings.iter().any(|w| w.contains("starts workload 'stress' at 200 s, not before the run ends at 120 s")),
        "{:?}",
        s.warnings
    );
    assert!(
        s.warnings.iter().any(|w| w == "report.window ends at 500 s, after the run ends at 120 s: its rates are over 0 s to 120 s"),
        "{:?}",
        s.warnings
    );
    let s = scenario::load(&text, "ok.toml", &["report.window=[\"130s\", \"140s\"]".into()]).unwrap().remove(0);
    assert!(s.warnings.iter().any(|w| w.contains("report.window starts at 130 s, not before the run ends at 120 s")), "{:?}", s.warnings);
}

#[test]
fn a_web_server_in_a_linux_guest_is_blamed_on_the_workload_not_on_os() {
    let text = one_guest("4GiB", "name = \"g\"\nmemory = \"1GiB\"\nworkload = { kind = \"web-server\" }\n", "");
    let e = load_err(&text);
    assert!(e.contains("vm.g.workload: web-server is the Ilwaco guest's web server") && e.contains("not in a linux guest"), "{e}");
    assert!(!e.contains("vm.g.os"), "{e}");
    // An Ilwaco guest asked for off the denali host is blamed on its os.
    let e = load_err(&base("os = \"ilwaco\""));
    assert!(e.contains("vm.g.os: Ilwaco guests run on the denali host"), "{e}");
}

#[test]
fn a_set_that_replaces_a_variant_value_warns() {
    let text = format!("{}\n[[variant]]\nname = \"big\"\nset = {{ \"vm.g.memory\" = \"2GiB\" }}\n", base(""));
    let s = scenario::load(&text, "ok.toml", &["vm.g.memory=3GiB".into()]).unwrap();
    assert_eq!(s[0].vms[0].guest.memory_pages, 3 << 18, "--set wins");
    assert!(s[0].warnings.iter().any(|w| w.contains("replaces what variant 'big' sets for vm.g.memory")), "{:?}", s[0].warnings);
    let s = scenario::load(&text, "ok.toml", &["vm.g.swap=1GiB".into()]).unwrap();
    assert!(s[0].warnings.is_empty(), "{:?}", s[0].warnings);
}

#[test]
fn a_value_set_twice_is_refused_not_left_to_order() {
    let twice = |a: &str, b: &str| scenario::load(&base(""), "ok.toml", &[a.into(), b.into()]);
    let e = twice("vm.g.memory=2GiB", "vm.g.memory=3GiB").unwrap_err().to_string();
    assert!(e.starts_with("--set vm.g.memory=3GiB: vm.g.memory: also set by --set vm.g.memory=2GiB"), "{e}");
    // A table and a field inside it overlap as well.
    let e = twice("vm.g.sysctl.vm.swappiness=7", "vm.g.sysctl={}").unwrap_err().to_string();
    assert!(e.contains("also set by --set vm.g.sysctl.vm.swappiness=7"), "{e}");
    // One value named two ways, by the workload's kind and by its index, is one value.
    let e = twice("vm.g.workload.stress.passes=2", "vm.g.workload.0.passes=3").unwrap_err().to_string();
    assert!(e.contains("also set by --set vm.g.workload.stress.passes=2"), "{e}");
    // Neighbours whose names share a prefix do not.
    assert!(twice("vm.g.memory=3GiB", "vm.g.memory_limit=3GiB").map_or_else(|e| !e.to_string().contains("also set"), |_| true));
}

/// The resolved scenario `s` writes reloads as `s` itself, its variant name aside.
fn assert_round_trips(s: &Scenario) {
    let again = scenario::load(&s.to_toml(), "resolved.toml", &[]).unwrap();
    let mut expect = s.clone();
    expect.variant = None;
    assert_eq!(again, vec![expect], "{} does not round-trip", s.full_name());
}

#[test]
fn resolved_scenarios_reload_identically() {
    for (name, _, text) in CASES {
        for s in scenario::load(text, name, &[]).unwrap() {
            assert_round_trips(&s);
        }
    }
}

#[test]
fn same_scenario_and_seed_give_identical_results() {
    let text = scenario::case_text("paging-stress").unwrap();
    let sets = ["vm.kali.workload.stress.instances=5".to_string(), "vm.kali.workload.write-1GiB.start=20s".to_string()];
    let run = || {
        let s = scenario::load(text, "x", &sets).unwrap().remove(0);
        let sim = common::run(&s);
        let r = sim.results();
        (r.summary.to_json(), r.series.bits())
    };
    let (a, b) = (run(), run());
    assert!(a.0.contains("pswpin"), "summary carries the counters");
    assert_eq!(a, b);
}

/// The scenario seed drives every random stream: the same seed gives the same run of a random
/// workload, another seed a different one; a workload that pins its own seed ignores the scenario's.
#[test]
fn the_scenario_seed_drives_random_workloads() {
    let run = |seed: u64, pinned: &str| {
        let text = one_guest(
            "1GiB",
            &format!(
                "name = \"g\"\nmemory = \"160MiB\"\nswap = \"64MiB\"\nworkload = {{ kind = \"random\", pages = 30000, touches = 200000{pinned} }}"
            ),
            &format!("seed = {seed}"),
        );
        let sim = common::run(&common::scenario(&text));
        let r = sim.results();
        (format!("{:?}", r.summary.vms[0].counters), r.series.bits())
    };
    let (a, b, c) = (run(1, ""), run(1, ""), run(2, ""));
    assert_eq!(a, b, "same seed, different runs");
    assert_ne!(a.0, c.0, "seeds 1 and 2 gave the same counters: the seed is not used");
    assert_eq!(run(1, ", seed = 7"), run(2, ", seed = 7"), "a pinned workload seed must not depend on the scenario seed");
}

/// Stopping the engine at arbitrary instants changes nothing: a guest that takes its own next
/// events (`guest::Horizon`) stops at the caller's stop and the run's end, and the events it
/// takes are the ones the engine would have handed it, at the same times with the same limits.
#[test]
fn a_run_stepped_at_odd_instants_equals_one_run() {
    let text = scenario::case_text("paging-stress").unwrap();
    let sets = ["vm.kali.workload.stress.instances=5".to_string(), "vm.kali.workload.write-1GiB.start=20s".to_string()];
    let s = scenario::load(text, "x", &sets).unwrap().remove(0);
    let once = common::run(&s);
    let whole = once.results();
    let mut sim = memvisor::Simulation::new(&s).unwrap();
    let mut t = 0;
    while !sim.run_until(t).unwrap() {
        t += 977_777;
    }
    let stepped = sim.results();
    assert!(stepped.summary.to_json().contains("pswpin"), "summary carries the counters");
    assert!(sim.world().guests()[0].counters().get(memvisor::guest::Counter::PswpIn) > 1_000, "the run must page");
    assert_eq!((whole.summary.to_json(), whole.series.bits()), (stepped.summary.to_json(), stepped.series.bits()));
}

#[test]
fn content_mix_shares_are_checked_and_round_trip() {
    let with = |extra: &str| base("").replace("passes = 1 }", &format!("passes = 1, {extra} }}"));
    let e = load_err(&with("zero_pages = 1.5"));
    assert!(e.contains("vm.g.workload.stress.zero_pages") && e.contains("from 0 to 1"), "{e}");
    let e = load_err(&with("common_pages = 0.7, duplicate_pages = 0.4"));
    assert!(e.contains("add up to") && e.contains("more than every page"), "{e}");
    let e = load_err(&with("content = \"gzip\""));
    assert!(e.contains("content") && e.contains("generic-heap"), "{e}");
    let s = scenario::load(&with("content = \"generic-heap\", zero_pages = 0.25, common_pages = 0.5, program = \"app\""), "ok.toml", &[])
        .unwrap();
    let text = s[0].to_toml();
    for k in ["zero_pages = 0.25", "common_pages = 0.5", "program = \"app\"", "content = \"generic-heap\""] {
        assert!(text.contains(k), "{k} missing from the resolved scenario:\n{text}");
    }
    let again = scenario::load(&text, "resolved.toml", &[]).unwrap();
    assert_eq!(again[0].vms[0].guest.workloads, s[0].vms[0].guest.workloads);
}

#[test]
fn a_memory_limit_is_whole_pages_rounded_down_as_the_kernel_reads_memory_max() {
    let limit = |l: &str| scenario::load(&base(""), "ok.toml", &[format!("vm.g.workload.memory_limit={l}")]);
    let s = limit("8191B").unwrap();
    assert!(s[0].to_toml().contains("memory_limit = \"4KiB\""), "{}", s[0].to_toml());
    let e = limit("4095B").unwrap_err().to_string();
    assert!(e.contains("a memory cgroup's limit must hold at least one page (4 KiB)"), "{e}");
    // The host's memory likewise, and the scenario written back says so.
    let s = scenario::load(&base(""), "ok.toml", &["host.memory=2000001KiB".into()]).unwrap();
    assert!(s[0].to_toml().contains("memory = \"2000000KiB\""), "{}", s[0].to_toml());
}

#[test]
fn frontswap_self_shrink_without_frontswap_is_refused() {
    let e = load_err(&base("frontswap_selfshrink = true"));
    assert!(e.contains("vm.g.frontswap_selfshrink") && e.contains("host.tmem = true"), "{e}");
    // Turning it off where there is nothing to shrink is harmless.
    scenario::load(&base("frontswap_selfshrink = false"), "ok.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn tmem_is_refused_on_a_host_that_is_not_xen() {
    let host = |profile: &str| {
        one_guest("4GiB", "name = \"g\"\nmemory = \"1GiB\"\nworkload = { kind = \"stress\", passes = 1 }\n", "").replacen(
            "[host]\n",
            &format!("[host]\nprofile = \"{profile}\"\ntmem = true\n"),
            1,
        )
    };
    for profile in ["kvm", "esx"] {
        let e = load_err(&host(profile));
        assert!(e.contains("host.tmem") && e.contains(&format!("host.profile is '{profile}' (")) && e.contains("profile = \"xen\""), "{e}");
    }
    scenario::load(&host("xen"), "ok.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
    // Saying it is off is no claim about the host.
    scenario::load(&host("kvm").replace("tmem = true", "tmem = false"), "ok.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn frontswap_self_shrink_says_why_frontswap_is_missing() {
    let tmem =
        |vm: &str| {
            one_guest("4GiB", &format!("name = \"g\"\nmemory = \"1GiB\"\nworkload = {{ kind = \"stress\", passes = 1 }}\n{vm}"), "")
                .replacen("[host]\n", "[host]\nprofile = \"xen\"\ntmem = true\n", 1)
        };
    let e = load_err(&tmem("os = \"windows\"\nfrontswap_selfshrink = true"));
    assert!(e.contains("a Linux client") && e.contains("'windows'"), "{e}");
    let e = load_err(&tmem("frontswap = false\nfrontswap_selfshrink = true"));
    assert!(e.contains("(frontswap = false)"), "{e}");
}

#[test]
fn only_the_variants_asked_for_are_resolved() {
    let text = memvisor::scenario::case_text("tmem-kernel-build").expect("a case");
    let sets = ["vm.el5-64.frontswap_selfshrink=true".to_string()];
    // The unchanged variant has no tmem, so it refuses the setting, and says it is the one.
    let e = scenario::load(text, "case:tmem-kernel-build", &sets).unwrap_err().to_string();
    assert!(e.contains("(variant 'unchanged')") && e.contains("host.tmem = true"), "{e}");
    let only = scenario::load_variants(text, "case:tmem-kernel-build", &sets, &["tmem".to_string()]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].variant.as_deref(), Some("tmem"));
    let e = scenario::load_variants(text, "case:tmem-kernel-build", &[], &["nope".to_string()]).unwrap_err().to_string();
    assert!(e.contains("no variant nope (variants: unchanged, selfballooning, tmem, tmem-dedup, tmem-dedup-compress)"), "{e}");
}

#[test]
fn an_error_every_variant_has_names_none_and_an_unchosen_variant_stops_nothing() {
    let text = memvisor::scenario::case_text("nfs-balloon").expect("a case");
    // Every variant refuses this --set: no variant is named.
    let e = scenario::load(text, "case:nfs-balloon", &["vm.nope.memory=1GiB".to_string()]).unwrap_err().to_string();
    assert!(e.contains("no 'vm' entry named 'nope'") && !e.contains("(variant"), "{e}");
    let e = scenario::load(text, "case:nfs-balloon", &["host.memory=1MiB".to_string()]).unwrap_err().to_string();
    assert!(!e.contains("(variant"), "{e}");
    // Variant a renames the VM, so only a refuses a --set of vm.g; choosing b, it runs.
    let two = base("").replacen(
        "name = \"t\"",
        "name = \"t\"\n[[variant]]\nname = \"a\"\nset = { \"vm.g.name\" = \"h\" }\n[[variant]]\nname = \"b\"\nset = {}",
        1,
    );
    let sets = ["vm.g.memory=256MiB".to_string()];
    let e = scenario::load(&two, "two.toml", &sets).unwrap_err().to_string();
    assert!(e.contains("(variant 'a')"), "{e}");
    let b = scenario::load_variants(&two, "two.toml", &sets, &["b".to_string()]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(b.len(), 1);
    // A lone variant is named unless the base without it fails the same way.
    let lone = base("").replacen("name = \"t\"", "name = \"t\"\n[[variant]]\nname = \"a\"\nset = { \"vm.g.name\" = \"h\" }", 1);
    let e = scenario::load(&lone, "one.toml", &["host.profile=nope".to_string()]).unwrap_err().to_string();
    assert!(!e.contains("(variant"), "{e}");
    let e = scenario::load(&lone, "one.toml", &sets).unwrap_err().to_string();
    assert!(e.contains("(variant 'a')"), "{e}");
}

fn load_set_err(text: &str, set: &str) -> String {
    match scenario::load(text, "bad.toml", &[set.to_string()]) {
        Ok(_) => panic!("accepted --set {set}"),
        Err(e) => e.to_string(),
    }
}

fn loads_with(text: &str, set: &str) {
    scenario::load(text, "ok.toml", &[set.to_string()]).unwrap_or_else(|e| panic!("--set {set}: {e}"));
}

#[test]
fn a_lookahead_of_zero_is_refused() {
    // Two guests at one instant yielded to each other for ever.
    let e = load_set_err(&base(""), "host.lookahead=0s");
    assert!(e.contains("host.lookahead") && e.contains("longer than zero"), "{e}");
    loads_with(&base(""), "host.lookahead=1ns");
}

#[test]
fn active_memory_sampling_finer_than_a_millisecond_is_refused() {
    // At 1 us a 30 s run did not end in minutes.
    let e = load_set_err(&base(""), "host.sample_period=1us");
    assert!(e.contains("host.sample_period") && e.contains("at least 1ms"), "{e}");
    loads_with(&base(""), "host.sample_period=1ms");
}

#[test]
fn costs_of_zero_references_or_past_a_second_are_refused() {
    // A stress without passes ran for ever at one instant with free references.
    let e = load_set_err(&base(""), "costs.dram_access=0s");
    assert!(e.contains("costs.dram_access") && e.contains("at least 1ns"), "{e}");
    // At 97 years a cost wrapped the clock after six pages (a balloon inflated for free).
    for cost in [
        "dram_access",
        "minor_fault",
        "host_back",
        "page_copy",
        "reclaim_scan",
        "reclaim_free",
        "reclaim_pageout",
        "balloon_page",
        "compress",
        "decompress",
        "host_swap_out",
        "blkback_request",
    ] {
        let e = load_set_err(&base(""), &format!("costs.{cost}=1001ms"));
        assert!(e.contains(&format!("costs.{cost}")) && e.contains("at most 1s"), "{e}");
        loads_with(&base(""), &format!("costs.{cost}=1s"));
    }
}

#[test]
fn device_waits_past_an_nfs_timeout_are_refused() {
    // At 97 years a queue of six requests wrapped the device clock (queue_wait_s 0.36).
    for field in ["latency", "seek"] {
        let e = load_set_err(&base(""), &format!("datastore.d.{field}=3074457345618258944ns"));
        assert!(e.contains(&format!("datastore.{field}")) && e.contains("at most 60s"), "{e}");
        loads_with(&base(""), &format!("datastore.d.{field}=60s"));
    }
}

#[test]
fn a_mapping_larger_than_memory_and_swap_is_refused_as_linux_overcommit_does() {
    // A 4 TiB stress-vm in a 1 GiB guest ran with a 4.6 GB page table.
    let guest = |w: &str| {
        one_guest("4GiB", &format!("name = \"g\"\nmemory = \"1GiB\"\nswap = \"1GiB\"\nworkload = {{ {w} }}"), "duration = \"10s\"")
    };
    for (w, field) in [
        ("kind = \"stress-vm\", bytes = \"4095GiB\"", "stress-vm.bytes"),
        ("kind = \"stress\", pages = \"3GiB\", passes = 1", "stress.pages"),
        ("kind = \"idle\", footprint = \"3GiB\"", "idle.footprint"),
        ("kind = \"random\", pages = 1000000, touches = 10", "random.pages"),
    ] {
        let e = load_err(&guest(w));
        assert!(e.contains(&format!("vm.g.workload.{field}")) && e.contains("more than the guest's memory and swap"), "{e}");
    }
    // Up to MemTotal and swap together, it is taken.
    assert!(scenario::load(&guest("kind = \"stress-vm\", bytes = \"1.5GiB\""), "ok.toml", &[]).is_ok());
}

#[test]
fn a_web_server_document_its_buffer_pools_cannot_hold_is_refused() {
    let text = memvisor::scenario::case_text("denali-scale").expect("a case");
    // 4 MiB needs 2,048 clusters of the default 1,024: no request was ever served. At 1 EiB its
    // page count wrapped to one page and requests were served as if it were small.
    for doc in ["4MiB", "1048576TiB"] {
        let e = load_set_err(text, &format!("vm.loaded.workload.web-server.document={doc}"));
        assert!(e.contains("vm.loaded.workload.web-server.document") && e.contains("more than the pools hold"), "{e}");
    }
    loads_with(text, "vm.loaded.workload.web-server.document=64KiB");
    // The default answer takes 4 mbufs, and its connection 2 more (template and request packet):
    // with 5 the first request slept for good.
    let e = load_set_err(text, "vm.loaded.workload.web-server.mbufs=5");
    assert!(e.contains("vm.loaded.workload.web-server.document") && e.contains("6 mbufs") && e.contains("mbufs = 5"), "{e}");
    loads_with(text, "vm.loaded.workload.web-server.mbufs=6");
}

#[test]
fn a_web_servers_msl_goes_with_the_server_closing() {
    let text = memvisor::scenario::case_text("denali-scale").expect("a case");
    // TIME_WAIT is the closing end's: a server whose clients close never holds it.
    let e = load_set_err(text, "vm.loaded.workload.web-server.msl=10s");
    assert!(e.contains("vm.loaded.workload.web-server.msl") && e.contains("close = \"server\""), "{e}");
    let sets = ["vm.loaded.workload.web-server.close=server".to_string(), "vm.loaded.workload.web-server.msl=10s".to_string()];
    for s in scenario::load(text, "x.toml", &sets).unwrap() {
        assert_round_trips(&s);
    }
}

#[test]
fn a_windows_guest_is_told_it_has_no_linux_knobs_and_refuses_linux_drivers() {
    let win = |extra: &str| base(&format!("os = \"windows\"\n{extra}"));
    // Said, not refused: run folders from before the check wrote them for every guest.
    for (setting, field) in [
        ("sysctl = { \"vm.swappiness\" = 10 }", "sysctl"),
        ("transparent_hugepage = \"always\"", "transparent_hugepage"),
        ("cgroup = \"v1\"", "cgroup"),
    ] {
        let s = scenario::load(&win(setting), "old.toml", &[]).unwrap().remove(0);
        let said = format!("vm.g.{field} is a Linux kernel setting, and the guest runs Windows: it is ignored");
        assert_eq!(s.warnings, [said]);
        // The resolved scenario leaves them out, so it reloads without a word.
        let again = scenario::load(&s.to_toml(), "again.toml", &[]).unwrap().remove(0);
        assert!(again.warnings.is_empty() && again.to_toml() == s.to_toml(), "{}", s.to_toml());
    }
    // A commit past RAM and pagefile is refused in Windows' words.
    let e = load_err(&win("swap = \"0B\"").replace("passes = 1", "passes = 1, pages = \"2GiB\""));
    assert!(e.contains("the guest's memory and pagefile") && e.contains("Windows refuses a commit past its limit"), "{e}");
    // Linux's self-ballooning driver is not a Windows guest's.
    let e = load_err(&win("balloon = \"virtio\"").replacen("[host]\n", "[host]\npolicy = \"xen-selfballoon\"\n", 1));
    assert!(e.contains("host.policy") && e.contains("xen-selfballoon is a Linux guest's driver, and VM 'g' runs windows"), "{e}");
}

#[test]
fn a_run_with_no_end_says_what_is_missing() {
    // No workload at all: not "no workload finishes", and at no line (nothing missing has one).
    let e = load_err(&one_guest("4GiB", "name = \"g\"\nmemory = \"1GiB\"\n", ""));
    assert!(e.starts_with("bad.toml: duration: ") && e.contains("no VM has a workload") && e.contains("[[vm.workload]]"), "{e}");
    let e = load_err(&one_guest("4GiB", "name = \"g\"\nmemory = \"1GiB\"\nworkload = { kind = \"stress\" }\n", ""));
    assert!(e.starts_with("bad.toml: duration: ") && e.contains("no workload finishes on its own"), "{e}");
}
