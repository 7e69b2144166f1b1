"""The live backend: real QEMU/KVM guests driven by the engine's controller and policies.

`livehost.LiveHost` fills the same host view a simulated run gives its policy, from QMP (balloon
size, virtio-balloon guest statistics), the VMs' memory cgroups, /proc and /sys/kernel/mm/ksm, and
applies the policy's targets (QMP `balloon`, `stop`/`cont`, cgroup `memory.high` or the v1 soft
limit, KSM settings). The loop is the engine's (`memvisor._core.Controller.tick`); `manage` only
calls it every period and keeps the run folder.
"""
