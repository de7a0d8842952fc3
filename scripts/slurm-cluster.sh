#!/usr/bin/env bash
# A one-node local Slurm cluster that SkyPilot 0.14.1 can launch on for real.
#
#   scripts/slurm-cluster.sh [up]        install (if missing), configure, start; idempotent
#   scripts/slurm-cluster.sh down        stop everything `up` started; idempotent
#   scripts/slurm-cluster.sh status      say what is running (and sinfo)
#   scripts/slurm-cluster.sh env [--json] the environment a SkyPilot client needs
#
# Must run as root on Debian (12). Sets up: munged, slurmctld and slurmd
# (started by hand, no systemd) with one node claiming 64 CPUs, 256 GiB and
# 8 fake H200 GPUs; a login user `skyuser`; an sshd on 127.0.0.1:$SSH_PORT; and a
# PRIVATE SkyPilot client home ($WORLDTUNE_SKY_HOME) holding ~/.slurm/config,
# the SSH key and ~/.sky. See scripts/slurm/README.md.
#
# Settings (environment):
#   WORLDTUNE_SKY_HOME         client HOME for SkyPilot   (default <repo>/.cache/sky-home)
#   WORLDTUNE_SLURM_CLUSTER    SkyPilot Slurm cluster name (default worldtune-local)
#   WORLDTUNE_SLURM_SSH_PORT   login sshd port on 127.0.0.1 (default 2222)
#   WORLDTUNE_SLURM_GPUS       fake H200 GPUs the node claims (default 8; 16 fits two 8-GPU clusters at once)
#   WORLDTUNE_SKY_API_PORT     port of the private SkyPilot API server (default 46581)
#   WORLDTUNE_SLURM_STATE      state/log directory         (default /var/lib/worldtune-slurm)
#   WORLDTUNE_SKY_CLI          `sky` executable used by `down` for `sky api stop`
#                              (default: first `sky` on PATH, else <repo>/.venv/bin/sky)
#   WORLDTUNE_SLURM_VERIFY_CATALOG_FROM  see copy_verification_catalog below
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$SCRIPT_DIR/.." && pwd)"
TPL_DIR="$SCRIPT_DIR/slurm"

SKY_HOME="$(realpath -m "${WORLDTUNE_SKY_HOME:-$REPO_DIR/.cache/sky-home}")"
CLUSTER="${WORLDTUNE_SLURM_CLUSTER:-worldtune-local}"
SSH_PORT="${WORLDTUNE_SLURM_SSH_PORT:-2222}"
API_PORT="${WORLDTUNE_SKY_API_PORT:-46581}"
STATE="${WORLDTUNE_SLURM_STATE:-/var/lib/worldtune-slurm}"
SKY_USER="skyuser"
NODE="$(hostname -s)"
CTLD_PORT=6817
SLURMD_PORT=6818
PARTITION="gpu"
GPU_COUNT="${WORLDTUNE_SLURM_GPUS:-8}"
[[ "$GPU_COUNT" =~ ^[1-9][0-9]?$ ]] || { echo "WORLDTUNE_SLURM_GPUS must be 1-99, not '$GPU_COUNT'" >&2; exit 2; }
# 8 CPUs and 32 GiB per fake GPU (an H200:8 cluster asks SkyPilot's catalog for 32 CPUs, 128 GiB)
CPUS=$((8 * GPU_COUNT))
MEM_MB=$((32768 * GPU_COUNT))
GPU_TYPE="h200"
PYTHON="/usr/bin/python3"          # Debian's Python 3.11: runs uv's venv and SkyPilot's runtime venv
SLURM_ETC="/etc/slurm"
MARKER="Managed by scripts/slurm-cluster.sh (worldtune)"
PACKAGES=(slurm-wlm munge openssh-server openssh-client rsync python3 python3-venv util-linux procps iproute2)

log() { printf '[slurm-cluster] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

# ---------------------------------------------------------------- helpers
# pid from a pid file if that process is alive and its name starts with $2.
live_pid() {
  local file="$1" name="$2" pid comm
  [ -s "$file" ] || return 1
  pid="$(tr -dc '0-9' <"$file")"
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
  comm="$(cat "/proc/$pid/comm" 2>/dev/null)" || return 1
  [[ "$comm" == "$name"* ]] || return 1
  echo "$pid"
}

# stop_pid <pid> <label>: TERM, wait up to 10 s, then KILL.
stop_pid() {
  local pid="$1" label="$2" i
  kill -0 "$pid" 2>/dev/null || return 0
  log "stopping $label (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}

# render <template> <dest> <mode>: fill @VAR@ placeholders; write only if the
# content changed. Returns 0 if the file changed, 1 if it was already current.
render() {
  local tpl="$1" dest="$2" mode="$3" tmp
  tmp="$(mktemp)"
  sed -e "s|@STATE@|$STATE|g" -e "s|@NODE@|$NODE|g" -e "s|@CTLD_HOST@|$NODE|g" \
      -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" \
      -e "s|@CPUS@|$CPUS|g" -e "s|@MEM_MB@|$MEM_MB|g" -e "s|@GPU_TYPE@|$GPU_TYPE|g" \
      -e "s|@GPU_COUNT@|$GPU_COUNT|g" -e "s|@GPU_MAX@|$((GPU_COUNT - 1))|g" \
      -e "s|@PARTITION@|$PARTITION|g" -e "s|@SSH_PORT@|$SSH_PORT|g" \
      -e "s|@SKY_USER@|$SKY_USER|g" -e "s|@SKY_HOME@|$SKY_HOME|g" \
      -e "s|@CLUSTER@|$CLUSTER|g" -e "s|@UV_BIN@|$STATE/uv/bin/uv|g" \
      -e "s|@PYTHON@|$PYTHON|g" "$tpl" >"$tmp"
  if [ -f "$dest" ] && cmp -s "$tmp" "$dest"; then rm -f "$tmp"; return 1; fi
  if [ -f "$dest" ] && ! grep -qF "$MARKER" "$dest"; then
    log "backing up foreign $dest to $dest.orig"; cp -p "$dest" "$dest.orig"
  fi
  install -D -m "$mode" "$tmp" "$dest"; rm -f "$tmp"
  log "wrote $dest"
  return 0
}

# ---------------------------------------------------------------- up: pieces
ensure_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# uv from PyPI, in its own venv, readable by the job user. The TaskProlog links it
# into each SkyPilot cluster's ~/.local/bin so SkyPilot never runs the curl installer.
ensure_uv() {
  if "$STATE/uv/bin/uv" --version >/dev/null 2>&1; then return 0; fi
  log "installing uv from PyPI into $STATE/uv"
  rm -rf "$STATE/uv"
  "$PYTHON" -m venv "$STATE/uv"
  "$STATE/uv/bin/pip" install -q --disable-pip-version-check "uv==0.13.9"  # as scripts/setup.sh
  "$STATE/uv/bin/uv" --version >/dev/null
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

ensure_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating munge key"
    install -d -o munge -g munge -m 0700 /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  if munge_ok; then return 0; fi
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged
  touch "$STATE/run/munged.started-by-us"
  local i; for i in $(seq 1 50); do munge_ok && return 0; sleep 0.2; done
  die "munged did not come up"
}

ensure_user() {
  id "$SKY_USER" >/dev/null 2>&1 || { log "creating user $SKY_USER"; useradd -m -s /bin/bash "$SKY_USER"; }
  # A locked account ('!') is refused by sshd without PAM; '*' = no password, keys only.
  [ "$(getent shadow "$SKY_USER" | cut -d: -f2)" = '*' ] || usermod -p '*' "$SKY_USER"
  local home; home="$(getent passwd "$SKY_USER" | cut -d: -f6)"
  install -d -o "$SKY_USER" -g "$SKY_USER" -m 0700 "$home/.ssh"
}

ensure_client_home() {
  install -d -m 0700 "$SKY_HOME" "$SKY_HOME/.ssh" "$SKY_HOME/.slurm" "$SKY_HOME/.sky"
  # The default home lies inside the repository and holds private keys: keep
  # git from ever seeing it, whatever the repository's own .gitignore says.
  if [ "$(dirname "$SKY_HOME")" = "$REPO_DIR/.cache" ] && [ ! -e "$REPO_DIR/.cache/.gitignore" ]; then
    printf '# Written by scripts/slurm-cluster.sh: generated state, never commit.\n*\n' >"$REPO_DIR/.cache/.gitignore"
  fi
  local key="$SKY_HOME/.ssh/worldtune-slurm"
  if [ ! -s "$key" ] || [ ! -s "$key.pub" ]; then
    rm -f "$key" "$key.pub"
    ssh-keygen -q -t ed25519 -N '' -C "worldtune-slurm-client" -f "$key"
  fi
  local home auth; home="$(getent passwd "$SKY_USER" | cut -d: -f6)"; auth="$home/.ssh/authorized_keys"
  touch "$auth"
  grep -qxF "$(cat "$key.pub")" "$auth" || cat "$key.pub" >>"$auth"
  chown "$SKY_USER:$SKY_USER" "$auth"; chmod 0600 "$auth"
  render "$TPL_DIR/slurm-ssh-config.in" "$SKY_HOME/.slurm/config" 0600 || true
  # The API server asks pypi.org for the latest SkyPilot release once a day unless
  # ~/.sky/version_cache.json is fresh: date it in 2100 so it never asks.
  local vc="$SKY_HOME/.sky/version_cache.json" want='{"release_version": null, "cached_at": 4102444800}'
  [ "$(cat "$vc" 2>/dev/null)" = "$want" ] || printf '%s' "$want" >"$vc"
  # Keep `sky check` and the optimizer on Slurm only: no other cloud's SDK is
  # consulted (and no network traffic for them). Left alone if someone else wrote it.
  local cfg="$SKY_HOME/.sky/config.yaml"
  if [ ! -e "$cfg" ] || grep -qF "$MARKER" "$cfg"; then
    render "$TPL_DIR/sky-config.yaml.in" "$cfg" 0600 || true
  fi
}

ensure_sshd() {
  install -d -m 0755 /run/sshd
  install -d -m 0700 "$STATE/ssh"
  [ -s "$STATE/ssh/ssh_host_ed25519_key" ] ||
    ssh-keygen -q -t ed25519 -N '' -f "$STATE/ssh/ssh_host_ed25519_key"
  local changed=0 pid
  render "$TPL_DIR/sshd_config.in" "$STATE/sshd_config" 0600 && changed=1
  /usr/sbin/sshd -t -f "$STATE/sshd_config" || die "bad $STATE/sshd_config"
  if pid="$(live_pid "$STATE/run/sshd.pid" sshd)"; then
    [ "$changed" = 1 ] || return 0
    stop_pid "$pid" "sshd"
  fi
  log "starting sshd on 127.0.0.1:$SSH_PORT"
  /usr/sbin/sshd -f "$STATE/sshd_config" -E "$STATE/log/sshd.log"
  local i; for i in $(seq 1 50); do live_pid "$STATE/run/sshd.pid" sshd >/dev/null && return 0; sleep 0.2; done
  die "sshd did not start; see $STATE/log/sshd.log"
}

# SkyPilot caches Slurm node facts (CPUs, GRES, partitions, ...) in the client's
# ~/.sky/kv_cache.db: forget them whenever slurm.conf is (re)written.
wipe_sky_slurm_cache() {
  local db="$SKY_HOME/.sky/kv_cache.db"
  [ -f "$db" ] || return 0
  "$PYTHON" - "$db" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=30)
try:
    n = con.execute("DELETE FROM kv_cache WHERE key LIKE 'slurm:%'").rowcount
    con.commit()
    print(f"[slurm-cluster] wiped {n} cached slurm:* rows from {sys.argv[1]}", file=sys.stderr)
except sqlite3.OperationalError as e:  # table not created yet
    print(f"[slurm-cluster] kv_cache not wiped: {e}", file=sys.stderr)
PY
}

ensure_slurm() {
  install -d -m 0755 "$STATE/slurmctld" "$STATE/slurmd" "$STATE/dev" "$SLURM_ETC"
  local i changed=0
  for i in $(seq 0 $((GPU_COUNT - 1))); do [ -e "$STATE/dev/nvidia$i" ] || : >"$STATE/dev/nvidia$i"; done
  render "$TPL_DIR/task-prolog.sh.in" "$STATE/task-prolog.sh" 0755 || true
  render "$TPL_DIR/slurm.conf.in" "$SLURM_ETC/slurm.conf" 0644 && changed=1
  render "$TPL_DIR/gres.conf.in" "$SLURM_ETC/gres.conf" 0644 && changed=1
  # cgroup.conf would only matter with cgroup plugins; none are used.

  local ctld slurmd
  ctld="$(live_pid "$STATE/run/slurmctld.pid" slurmctld || true)"
  slurmd="$(live_pid "$STATE/run/slurmd.pid" slurmd || true)"
  if [ "$changed" = 1 ]; then
    wipe_sky_slurm_cache
    [ -z "$slurmd" ] || stop_pid "$slurmd" slurmd
    [ -z "$ctld" ] || stop_pid "$ctld" slurmctld
    ctld=""; slurmd=""
  fi
  if [ -z "$ctld" ]; then
    log "starting slurmctld"
    slurmctld -i
  fi
  for i in $(seq 1 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.2; done
  scontrol ping 2>/dev/null | grep -q 'is UP' || die "slurmctld is not up; see $STATE/log/slurmctld.log"
  if [ -z "$slurmd" ]; then
    log "starting slurmd (node $NODE)"
    slurmd -N "$NODE"
  fi
  local st
  for i in $(seq 1 100); do
    st="$(sinfo -h -n "$NODE" -o '%t' 2>/dev/null | head -n1)"
    case "$st" in
      idle|mix|alloc|comp) return 0 ;;
      down*|drain*|drng*|fail*) scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true ;;
    esac
    sleep 0.3
  done
  die "node $NODE not ready (state '$st'); see $STATE/log/slurmd.log"
}

# ---- VERIFICATION-ONLY STEP (drop when the project writes its own catalog) ----
# A GPU request needs ~/.sky/catalogs/v8/common/accelerators.csv in the client
# home. The project writes those rows from its own offers snapshot; for manual
# verification this copies the shared sample catalog, only where files are absent.
# Disabled unless WORLDTUNE_SLURM_VERIFY_CATALOG_FROM names a catalog directory,
# e.g. /work/shared/data/skypilot-catalog-v8.
copy_verification_catalog() {
  local src="${WORLDTUNE_SLURM_VERIFY_CATALOG_FROM:-}"
  [ -n "$src" ] || return 0
  [ -d "$src" ] || { log "no catalog at $src; skipped"; return 0; }
  install -d "$SKY_HOME/.sky/catalogs/v8"
  cp -rn "$src/." "$SKY_HOME/.sky/catalogs/v8/"
  chmod -R u+w "$SKY_HOME/.sky/catalogs/v8"
}
# -------------------------------------------------------------------------------

cmd_env() {
  if [ "${1:-}" = "--json" ]; then
    "$PYTHON" -c 'import json,sys; print(json.dumps(dict(zip(sys.argv[1::2], sys.argv[2::2]))))' \
      HOME "$SKY_HOME" SKYPILOT_DISABLE_USAGE_COLLECTION 1 \
      SKYPILOT_API_SERVER_LOCAL_PORT "$API_PORT" AWS_EC2_METADATA_DISABLED true \
      WORLDTUNE_SKY_HOME "$SKY_HOME" \
      WORLDTUNE_SLURM_CLUSTER "$CLUSTER" WORLDTUNE_SLURM_INFRA "slurm/$CLUSTER"
    return
  fi
  printf 'export HOME=%q\n' "$SKY_HOME"
  printf 'export SKYPILOT_DISABLE_USAGE_COLLECTION=1\n'
  printf 'export SKYPILOT_API_SERVER_LOCAL_PORT=%q\n' "$API_PORT"
  printf 'export AWS_EC2_METADATA_DISABLED=true\n'
  printf 'export WORLDTUNE_SKY_HOME=%q\n' "$SKY_HOME"
  printf 'export WORLDTUNE_SLURM_CLUSTER=%q\n' "$CLUSTER"
  printf 'export WORLDTUNE_SLURM_INFRA=%q\n' "slurm/$CLUSTER"
}

cmd_up() {
  need_root
  local t0=$SECONDS
  ensure_packages
  install -d -m 0755 "$STATE" "$STATE/run" "$STATE/log"
  ensure_uv
  ensure_munge
  ensure_user
  ensure_client_home
  ensure_sshd
  ensure_slurm
  copy_verification_catalog
  log "up in $((SECONDS - t0)) s; SkyPilot infra: slurm/$CLUSTER"
  log "client environment (also: $0 env):"
  cmd_env
}

# ---------------------------------------------------------------- down

# pids of processes whose command line contains $1 (fixed string), optionally only $2 (comm).
pids_with_cmdline() {
  local needle="$1" comm="${2:-}" d pid
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    [ "$pid" = "$$" ] && continue
    [ -z "$comm" ] || [ "$(cat "$d/comm" 2>/dev/null)" = "$comm" ] || continue
    { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null | grep -qF -- "$needle" && echo "$pid"
  done
  return 0
}

# pids whose environment has HOME=$SKY_HOME.
pids_with_home() {
  local d pid
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    [ "$pid" = "$$" ] && continue
    { tr '\0' '\n' <"$d/environ"; } 2>/dev/null | grep -qxF "HOME=$SKY_HOME" && echo "$pid"
  done
  return 0
}

stop_sky_api_server() {
  local sky="${WORLDTUNE_SKY_CLI:-}" pid
  [ -n "$sky" ] || sky="$(command -v sky || true)"
  [ -n "$sky" ] || { [ ! -x "$REPO_DIR/.venv/bin/sky" ] || sky="$REPO_DIR/.venv/bin/sky"; }
  if [ -n "$sky" ] && [ -d "$SKY_HOME/.sky" ]; then
    HOME="$SKY_HOME" SKYPILOT_DISABLE_USAGE_COLLECTION=1 SKYPILOT_API_SERVER_LOCAL_PORT="$API_PORT" \
      timeout 120 "$sky" api stop >/dev/null 2>&1 || true
  fi
  # Any API server still running with the private HOME (on any port, e.g. one a
  # test started without SKYPILOT_API_SERVER_LOCAL_PORT).
  for pid in $(pids_with_home); do
    { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q -- '-m sky\.server\.server' &&
      stop_pid "$pid" "SkyPilot API server"
  done
  return 0
}

# SSH ControlMasters SkyPilot leaves behind (they outlive `sky api stop`; idle
# ones exit after ControlPersist=300 s). Their title is rewritten to
# "ssh: /tmp/sky_ssh_<user hash>/... [mux]" and their environment is unreadable,
# and the user hash and socket are the same for every client home of this OS
# user: so they are only ended when no other SkyPilot API server is running.
stop_ssh_masters() {
  local hash pid
  hash="$(cat "$SKY_HOME/.sky/user_hash" 2>/dev/null || true)"
  [ -n "$hash" ] || return 0
  for pid in $(pids_with_cmdline '-m sky.server.server'); do
    if ! { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -qxF "HOME=$SKY_HOME"; then
      log "another SkyPilot API server (pid $pid) may share the ssh ControlMasters in /tmp/sky_ssh_$hash: left running"
      return 0
    fi
  done
  for pid in $(pids_with_cmdline "/tmp/sky_ssh_$hash/" ssh); do
    stop_pid "$pid" "ssh ControlMaster"
  done
  return 0
}

cmd_down() {
  need_root
  local pid i
  stop_sky_api_server
  stop_ssh_masters
  # Leftover SkyPilot clusters: cancel their Slurm jobs so slurmstepd ends the tasks.
  if command -v scancel >/dev/null && scontrol ping 2>/dev/null | grep -q 'is UP'; then
    if [ -n "$(squeue -h -u "$SKY_USER" -o %i 2>/dev/null)" ]; then
      log "cancelling Slurm jobs of $SKY_USER"
      scancel -u "$SKY_USER" 2>/dev/null || true
      for i in $(seq 1 50); do [ -z "$(squeue -h -u "$SKY_USER" -t R,CG,PD -o %i 2>/dev/null)" ] && break; sleep 0.2; done
    fi
  fi
  pid="$(live_pid "$STATE/run/slurmd.pid" slurmd || true)"; [ -z "$pid" ] || stop_pid "$pid" slurmd
  pid="$(live_pid "$STATE/run/slurmctld.pid" slurmctld || true)"; [ -z "$pid" ] || stop_pid "$pid" slurmctld
  # Processes the dedicated job user still runs (skylet, tasks), one by one.
  if id "$SKY_USER" >/dev/null 2>&1; then
    for pid in $(ps -o pid= -u "$SKY_USER" 2>/dev/null); do stop_pid "$pid" "$SKY_USER process"; done
  fi
  pid="$(live_pid "$STATE/run/sshd.pid" sshd || true)"; [ -z "$pid" ] || stop_pid "$pid" sshd
  # Node-local SkyPilot runtime dirs the TaskProlog made (/tmp/<cluster>), which
  # outlive a scancel'd job.
  local lock dir
  for lock in /tmp/*/.worldtune-prolog.lock; do
    [ -e "$lock" ] || continue
    dir="$(dirname "$lock")"
    [ "$(stat -c %U "$dir")" = "$SKY_USER" ] && rm -rf -- "$dir"
  done
  if [ -e "$STATE/run/munged.started-by-us" ]; then
    pid="$(live_pid /run/munge/munged.pid munged || true)"; [ -z "$pid" ] || stop_pid "$pid" munged
    rm -f "$STATE/run/munged.started-by-us"
  fi
  log "down"
}

# ---------------------------------------------------------------- status
cmd_status() {
  local pid
  say() { printf '%-22s %s\n' "$1" "$2"; }
  updown() { if [ -n "$1" ]; then echo "up (pid $1)"; else echo down; fi; }
  if munge_ok; then say munged up; else say munged down; fi
  pid="$(live_pid "$STATE/run/slurmctld.pid" slurmctld 2>/dev/null || true)"; say slurmctld "$(updown "$pid")"
  pid="$(live_pid "$STATE/run/slurmd.pid" slurmd 2>/dev/null || true)"; say slurmd "$(updown "$pid")"
  pid="$(live_pid "$STATE/run/sshd.pid" sshd 2>/dev/null || true)"; say "sshd 127.0.0.1:$SSH_PORT" "$(updown "$pid")"
  if ss -Hltn "sport = :$API_PORT" 2>/dev/null | grep -q .; then say "sky api :$API_PORT" up; else say "sky api :$API_PORT" down; fi
  say "client home" "$SKY_HOME"
  say "infra" "slurm/$CLUSTER"
  if scontrol ping 2>/dev/null | grep -q 'is UP'; then
    echo "--- sinfo"; sinfo -o '%P %a %D %t %N %c %m %G' || true
    echo "--- squeue"; squeue || true
  fi
}

case "${1:-up}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) shift; cmd_env "$@" ;;
  -h|--help|help) sed -n '2,24p' "$0" ;;
  *) die "unknown subcommand '$1' (up|down|status|env)" ;;
esac
