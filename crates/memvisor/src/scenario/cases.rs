//! The case studies shipped with memvisor, runnable by name (DESIGN.md section 6).

/// (name, one-line description, scenario text).
pub const CASES: &[(&str, &str, &str)] = &[
    (
        "paging-stress",
        "seed 003: a 2 GiB Linux guest under 1..8 stress instances; paging rate and 1 GiB write time",
        include_str!("cases/paging-stress.toml"),
    ),
    (
        "nfs-balloon",
        "seed 001: a reserved VM running stress --vm starves a 1 GiB VM on NFS running bonnie++; 4 vs 8 GiB host",
        include_str!("cases/nfs-balloon.toml"),
    ),
    (
        "esx-overcommit",
        "seed 000: four 8 GiB Windows guests running a .NET heap benchmark on a 16 GiB ESX host, against one alone",
        include_str!("cases/esx-overcommit.toml"),
    ),
    (
        "tps-evaporates",
        "seed 000: four identical Windows guests share most of their memory while idle; the .NET benchmark's heaps overwrite it",
        include_str!("cases/tps-evaporates.toml"),
    ),
    (
        "tmem-kernel-build",
        "seed 002: four Xen guests build Linux twice on a 2 GB host; unchanged, self-ballooning, tmem, +dedup, +compression",
        include_str!("cases/tmem-kernel-build.toml"),
    ),
    (
        "denali-scale",
        "seed 004: up to 10,000 Ilwaco web servers paged whole on a 2 GiB Denali host; mbuf footprint and throughput, list vs hash pool",
        include_str!("cases/denali-scale.toml"),
    ),
];

/// The scenario text of a case, by name.
pub fn case_text(name: &str) -> Option<&'static str> {
    CASES.iter().find(|(n, _, _)| *n == name).map(|(_, _, t)| *t)
}
