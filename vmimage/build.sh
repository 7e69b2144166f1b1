#!/bin/bash
# Builds the small Linux guest the live backend's tests and `memvisor validate balloon` boot under
# QEMU: Debian's cloud kernel (unpacked from its package, not installed), a busybox-static
# initramfs with the virtio balloon and disk drivers, and memhog. Installs qemu-system-x86 and
# busybox-static from Debian's packages if they are missing. Usage: build.sh OUT_DIR
set -euo pipefail
out=${1:?usage: build.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
if [ -f "$out/bzImage" ] && [ -f "$out/initrd.gz" ] && [ "$out/initrd.gz" -nt "$here/init" ] \
    && [ "$out/initrd.gz" -nt "$here/memhog.c" ] && [ "$out/initrd.gz" -nt "$here/build.sh" ]; then
    exit 0
fi
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
if [ ${#need[@]} -gt 0 ]; then
    echo "vmimage: installing ${need[*]} (Debian packages)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The newest cloud kernel the archive has (the meta-package names it).
pkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
[ -n "$pkg" ] || { echo "vmimage: no linux-image-cloud-amd64 in the package index (run apt-get update)" >&2; exit 1; }
(cd "$work" && apt-get download -q "$pkg" >/dev/null 2>&1) || { apt-get update -q >/dev/null; (cd "$work" && apt-get download -q "$pkg" >/dev/null); }
dpkg-deb -x "$work"/*.deb "$work/k"
root="$work/root"
mkdir -p "$root"/{bin,dev,proc,sys,lib/modules,tmp}
cp /bin/busybox "$root/bin/busybox"
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_balloon virtio_blk; do
    f=$(find "$work/k/lib/modules" -name "$m.ko*" | head -1)
    [ -n "$f" ] || { echo "vmimage: module $m not in $pkg" >&2; exit 1; }
    case "$f" in
        *.xz) xz -dc "$f" > "$root/lib/modules/$m.ko" ;;
        *.zst) zstd -qdc "$f" > "$root/lib/modules/$m.ko" ;;
        *) cp "$f" "$root/lib/modules/$m.ko" ;;
    esac
done
gcc -static -O2 -o "$root/bin/memhog" "$here/memhog.c"
install -m 755 "$here/init" "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -9) > "$out/initrd.gz.tmp"
cp "$work"/k/boot/vmlinuz-* "$out/bzImage.tmp"
echo "$pkg" > "$out/kernel-package"
mv "$out/bzImage.tmp" "$out/bzImage"
mv "$out/initrd.gz.tmp" "$out/initrd.gz"
echo "vmimage: $out (kernel $pkg)"
