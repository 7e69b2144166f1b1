#!/usr/bin/python3
"""Sample a v1 memory cgroup + its processes every 100 ms until a stop file appears.

Outputs:
  cgroup.csv : t,wall,cg_rss,cg_cache,cg_mapped_file,cg_shmem,cg_usage,kmem_usage,
               slab_kb,sreclaimable_kb,sunreclaim_kb,nprocs,nzombie,sample_ms
  procs.csv  : t,comm,count,rss_anon_kb,rss_file_kb   (one row per comm per sample)
"""
import os, sys, time

CG = sys.argv[1]
OUT = sys.argv[2]
STOP = sys.argv[3]
PERIOD = 0.1

def read_stat():
    d = {}
    with open(os.path.join(CG, 'memory.stat')) as f:
        for line in f:
            k, v = line.split()
            d[k] = int(v)
    return d

def read_int(p):
    try:
        with open(p) as f:
            return int(f.read().strip())
    except Exception:
        return -1

def read_meminfo():
    d = {}
    with open('/proc/meminfo') as f:
        for line in f:
            k, rest = line.split(':', 1)
            if k in ('Slab', 'SReclaimable', 'SUnreclaim'):
                d[k] = int(rest.split()[0])
    return d

kmem_path = os.path.join(CG, 'memory.kmem.usage_in_bytes')
have_kmem = os.path.exists(kmem_path)

fc = open(os.path.join(OUT, 'cgroup.csv'), 'w')
fp = open(os.path.join(OUT, 'procs.csv'), 'w')
fc.write('t,wall,cg_rss,cg_cache,cg_mapped_file,cg_shmem,cg_usage,kmem_usage,'
         'slab_kb,sreclaimable_kb,sunreclaim_kb,nprocs,nzombie,sample_ms\n')
fp.write('t,comm,count,rss_anon_kb,rss_file_kb\n')

t0 = time.monotonic()
nxt = t0
while True:
    ts = time.monotonic()
    wall = time.time()
    st = read_stat()
    mi = read_meminfo()
    kmem = read_int(kmem_path) if have_kmem else -1
    usage = read_int(os.path.join(CG, 'memory.usage_in_bytes'))
    try:
        with open(os.path.join(CG, 'cgroup.procs')) as f:
            pids = f.read().split()
    except Exception:
        pids = []
    agg = {}
    nz = 0
    nproc = 0
    for pid in pids:
        try:
            with open('/proc/%s/status' % pid) as f:
                txt = f.read()
        except Exception:
            continue
        name = None; state = None; ra = 0; rf = 0
        for line in txt.split('\n'):
            if line.startswith('Name:'):
                name = line[5:].strip()
            elif line.startswith('State:'):
                state = line[6:].strip()[:1]
            elif line.startswith('RssAnon:'):
                ra = int(line.split()[1])
            elif line.startswith('RssFile:'):
                rf = int(line.split()[1])
        if name is None:
            continue
        if state == 'Z':
            nz += 1
            continue
        nproc += 1
        a = agg.setdefault(name, [0, 0, 0])
        a[0] += 1; a[1] += ra; a[2] += rf
    te = time.monotonic()
    t = ts - t0
    fc.write('%.3f,%.3f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%.2f\n' % (
        t, wall, st.get('rss', -1), st.get('cache', -1), st.get('mapped_file', -1),
        st.get('shmem', -1), usage, kmem, mi['Slab'], mi['SReclaimable'],
        mi['SUnreclaim'], nproc, nz, (te - ts) * 1000))
    for name, (c, ra, rf) in sorted(agg.items()):
        fp.write('%.3f,%s,%d,%d,%d\n' % (t, name.replace(',', '_'), c, ra, rf))
    if os.path.exists(STOP):
        break
    nxt += PERIOD
    now = time.monotonic()
    if nxt > now:
        time.sleep(nxt - now)
    else:
        # fell behind: skip missed ticks
        nxt = now
fc.close(); fp.close()
