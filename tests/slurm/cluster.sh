#!/usr/bin/env bash
# A real one-node SLURM cluster on localhost (controller + daemon + munge), for tests and CI.
#
#   tests/slurm/cluster.sh up       install the Debian packages if missing, write the config, start
#                                   munged, slurmctld and slurmd, wait until a GPU job runs. Idempotent.
#   tests/slurm/cluster.sh down     cancel this cluster's jobs, stop its daemons by pid, remove the
#                                   /etc/slurm links. Safe to call twice or when nothing is up.
#   tests/slurm/cluster.sh status   exit 0 when the cluster answers, 3 when it does not.
#   tests/slurm/cluster.sh install  only install the Debian packages (CI's setup step).
#
# Environment:
#   POSYM_SLURM_DIR      scratch folder: config, munge key, state, logs, pid files (default /tmp/posym-slurm)
#   POSYM_SLURM_TIMEOUT  seconds `up` waits for the node to accept jobs (default 120)
#
# Needs root (re-runs itself with `sudo -n` when that works). Debian 12 ships Slurm 22.05 and munge 0.5.15.
# The node has a fake GPU: a character device declared as gres/gpu, so `--gpus=1` jobs really run
# through SLURM and see CUDA_VISIBLE_DEVICES=0.
set -euo pipefail

readonly PACKAGES=(slurmctld slurmd slurm-client munge)
readonly ETC=/etc/slurm

DIR=$(realpath -m "${POSYM_SLURM_DIR:-/tmp/posym-slurm}")  # absolute: `slurmctld -f relative` dies after ~60 s
readonly DIR
readonly TIMEOUT=${POSYM_SLURM_TIMEOUT:-120}
readonly CONF=$DIR/slurm.conf GRES_CONF=$DIR/gres.conf GPU_DEV=$DIR/nvidia0
readonly MUNGE_DIR=$DIR/munge RUN=$DIR/run LOGS=$DIR/log STATE=$DIR/state
readonly MUNGE_KEY=$MUNGE_DIR/munge.key MUNGE_SOCKET=$MUNGE_DIR/munge.socket
readonly MUNGE_PID=$MUNGE_DIR/munged.pid CTLD_PID=$RUN/slurmctld.pid SLURMD_PID=$RUN/slurmd.pid
export SLURM_CONF=$CONF  # for the client commands of this script; jobs use the /etc/slurm links

say() { printf '[cluster.sh] %s\n' "$*"; }
die() { printf '[cluster.sh] ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- processes, always by pid -------------------------------------------------------------------

# pid from a pid file if that process is alive and is the expected program, else nothing
live_pid() {  # name pidfile
    local pid
    [[ -r $2 ]] || return 1
    pid=$(tr -dc '0-9' <"$2")
    [[ -n $pid && -r /proc/$pid/comm && $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]] || return 1
    echo "$pid"
}

stop_pid() {  # name pidfile
    local pid i t0
    t0=$(now)
    if ! pid=$(live_pid "$1" "$2"); then
        rm -f "$2"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do  # 20 s
        [[ -e /proc/$pid ]] || break
        sleep 0.2
    done
    if [[ -e /proc/$pid ]]; then
        say "$1 (pid $pid) ignored SIGTERM for 20 s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$2"
    say "stopped $1 (pid $pid) in $(since "$t0") s"
}

node_state() { sinfo -h -N -n localhost -o %T 2>/dev/null | head -n1; }

is_up() {
    live_pid munged "$MUNGE_PID" >/dev/null && live_pid slurmctld "$CTLD_PID" >/dev/null \
        && live_pid slurmd "$SLURMD_PID" >/dev/null || return 1
    case $(timeout 10 bash -c 'sinfo -h -N -n localhost -o %T 2>/dev/null | head -n1') in
        idle | mixed | allocated | completing) return 0 ;;
        *) return 1 ;;
    esac
}

show_logs() {
    local f
    for f in "$MUNGE_DIR"/munged.log "$LOGS"/slurmctld.log "$LOGS"/slurmd.log; do
        [[ -s $f ]] || continue
        printf '\n----- last lines of %s -----\n' "$f" >&2
        tail -n 25 "$f" >&2
    done
}

# --- up -----------------------------------------------------------------------------------------

install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get (this script targets Debian 12)"
    say "installing ${missing[*]} (log: $LOGS/apt.log)"
    export DEBIAN_FRONTEND=noninteractive
    local before_munged
    before_munged=$(live_pid munged /run/munge/munged.pid || true)
    {
        # refresh the package lists only when they do not know the packages or are stale
        apt-cache show "${missing[@]}" >/dev/null 2>&1 || apt-get update -q
        apt-get install -y -q --no-install-recommends "${missing[@]}" \
            || { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; }
    } >"$LOGS/apt.log" 2>&1 || { tail -n 30 "$LOGS/apt.log" >&2; die "apt-get install failed"; }
    # Where an init system honours the package scripts, munge's postinst starts the system munged;
    # it is not ours to keep (we run our own, on our own socket), so stop exactly that one.
    local started
    if started=$(live_pid munged /run/munge/munged.pid) && [[ $started != "$before_munged" ]]; then
        stop_pid munged /run/munge/munged.pid
    fi
}

write_munge_key() {
    install -d -o munge -g munge -m 0755 "$MUNGE_DIR"
    [[ -s $MUNGE_KEY ]] && return 0
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile="$MUNGE_KEY" --force >/dev/null
    else
        dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none
    fi
    chown munge:munge "$MUNGE_KEY"
    chmod 0400 "$MUNGE_KEY"
}

real_memory_mb() {  # 90 % of what slurmd detects, leaving room for the OS and the test itself
    local mb
    mb=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n1)
    [[ -n $mb ]] || mb=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
    echo $((mb * 9 / 10))
}

write_config() {
    install -d -m 0755 "$RUN" "$LOGS" "$STATE/slurmctld" "$STATE/slurmd"
    # The fake GPU: any character device works (this is /dev/null's number); Slurm derives the
    # index in CUDA_VISIBLE_DEVICES from the trailing digit of the name.
    if [[ ! -c $GPU_DEV ]]; then
        rm -f "$GPU_DEV"
        mknod "$GPU_DEV" c 1 3 2>/dev/null || ln -s /dev/null "$GPU_DEV"  # no CAP_MKNOD: a link to one
    fi
    cat >"$GRES_CONF" <<EOF
# Written by tests/slurm/cluster.sh; rewritten by every \`up\`.
AutoDetect=off
NodeName=localhost Name=gpu File=$GPU_DEV
EOF
    cat >"$CONF" <<EOF
# Written by tests/slurm/cluster.sh; rewritten by every \`up\`. A one-node test cluster, not a template.
ClusterName=posym
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups, no accounting daemon: job status comes from squeue (keep MinJobAge >= 120 s for that)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=300
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
InactiveLimit=0
KillWait=10
SlurmdTimeout=60
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$(real_memory_mb) Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}

# The executor plugin strips every SLURM_* variable (SLURM_CONF too) before its nested srun, so the
# config must also be found at the default path.
link_etc() {
    local name target
    if [[ ! -d $ETC ]]; then
        mkdir -p "$ETC"
        touch "$RUN/etc-slurm-created"
    fi
    for name in slurm.conf gres.conf; do
        target=$DIR/$name
        if [[ -L $ETC/$name ]]; then
            local old
            old=$(readlink "$ETC/$name")
            [[ $old == "$target" ]] && continue
            [[ -e $old ]] && die "$ETC/$name already links to $old (another test cluster?); run its \`down\` first"
            rm -f "$ETC/$name"  # dangling link from an earlier scratch folder
        elif [[ -e $ETC/$name ]]; then
            die "$ETC/$name is a real file; refusing to replace it (is this a real SLURM host?)"
        fi
        ln -s "$target" "$ETC/$name"
    done
}

unlink_etc() {  # remove only the links that point into this scratch folder
    local name
    for name in slurm.conf gres.conf; do
        if [[ -L $ETC/$name && $(readlink "$ETC/$name") == "$DIR/$name" ]]; then
            rm -f "$ETC/$name"
        fi
    done
    if [[ -e $RUN/etc-slurm-created ]]; then
        rmdir "$ETC" 2>/dev/null || true
        rm -f "$RUN/etc-slurm-created"
    fi
}

STARTED=()  # daemons this call started, stopped again if `up` fails

start_munged() {
    live_pid munged "$MUNGE_PID" >/dev/null && return 0
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    runuser -u munge -- /usr/sbin/munged --key-file="$MUNGE_KEY" --socket="$MUNGE_SOCKET" \
        --pid-file="$MUNGE_PID" --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed"
    STARTED+=(munged)
}

start_slurmctld() {
    live_pid slurmctld "$CTLD_PID" >/dev/null && return 0
    # -c: start from a clean state (no jobs, node states or job ids from an earlier run)
    /usr/sbin/slurmctld -c -f "$CONF"
    STARTED+=(slurmctld)
}

start_slurmd() {
    live_pid slurmd "$SLURMD_PID" >/dev/null && return 0
    /usr/sbin/slurmd -f "$CONF" -N localhost  # -N: the node is called localhost, whatever the host name
    STARTED+=(slurmd)
}

wait_for() {  # description deadline command...
    local what=$1 deadline=$2
    shift 2
    until "$@"; do
        if (($(date +%s) >= deadline)); then
            show_logs
            die "timed out waiting for $what"
        fi
        sleep 0.2
    done
}

munge_answers() { [[ -S $MUNGE_SOCKET ]] && munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }
node_idle() { [[ $(node_state) == idle ]]; }

undo_started() {
    local name
    if ((${#STARTED[@]})); then
        say "up failed; stopping the daemons it started: ${STARTED[*]}"
    fi
    for name in slurmd slurmctld munged; do
        [[ " ${STARTED[*]} " == *" $name "* ]] || continue
        case $name in
            munged) stop_pid munged "$MUNGE_PID" ;;
            slurmctld) stop_pid slurmctld "$CTLD_PID" ;;
            slurmd) stop_pid slurmd "$SLURMD_PID" ;;
        esac
    done
    STARTED=()
    if ! live_pid munged "$MUNGE_PID" >/dev/null && ! live_pid slurmctld "$CTLD_PID" >/dev/null \
        && ! live_pid slurmd "$SLURMD_PID" >/dev/null; then
        unlink_etc
    fi
}

cmd_up() {
    local t0 t1 deadline gpus
    t0=$(now)
    if [[ -d $RUN ]] && is_up; then
        say "already up ($(since "$t0") s); scratch folder $DIR"
        return 0
    fi
    install -d -m 0755 "$DIR" "$LOGS" "$RUN"
    install_packages
    say "packages ready after $(since "$t0") s"
    t1=$(now)
    trap undo_started EXIT
    write_munge_key
    write_config
    link_etc
    deadline=$(($(date +%s) + TIMEOUT))
    start_munged
    wait_for "munged to answer on $MUNGE_SOCKET" "$deadline" munge_answers
    start_slurmctld
    start_slurmd
    wait_for "node localhost to become idle (see sinfo -R)" "$deadline" node_idle
    gpus=$(timeout 60 srun -p debug -N1 -n1 -t 1 --mem=50 --gpus=1 printenv CUDA_VISIBLE_DEVICES 2>&1) \
        || { show_logs; die "a one-GPU test job failed: $gpus"; }
    [[ $gpus == 0 ]] || { show_logs; die "the one-GPU test job saw CUDA_VISIBLE_DEVICES='$gpus', expected 0"; }
    trap - EXIT
    say "daemons up and a GPU job ran in $(since "$t1") s"
    say "cluster up in $(since "$t0") s; scratch folder $DIR (logs in $LOGS)"
}

# --- down ---------------------------------------------------------------------------------------

cmd_down() {
    local t0 i
    local -a ids
    t0=$(now)
    if live_pid slurmctld "$CTLD_PID" >/dev/null; then
        mapfile -t ids < <(timeout 10 squeue -h -o %i 2>/dev/null || true)
        if ((${#ids[@]})); then
            say "cancelling jobs: ${ids[*]}"
            scancel "${ids[@]}" 2>/dev/null || true
            for ((i = 0; i < 75; i++)); do  # 15 s for their processes to end
                [[ -z $(timeout 10 squeue -h -o %i 2>/dev/null) ]] && break
                sleep 0.2
            done
        fi
    fi
    stop_pid slurmd "$SLURMD_PID"
    stop_pid slurmctld "$CTLD_PID"
    stop_pid munged "$MUNGE_PID"
    unlink_etc
    say "down in $(since "$t0") s"
}

# --- status -------------------------------------------------------------------------------------

cmd_status() {
    local name file pid
    for name in munged slurmctld slurmd; do
        case $name in
            munged) file=$MUNGE_PID ;;
            slurmctld) file=$CTLD_PID ;;
            slurmd) file=$SLURMD_PID ;;
        esac
        if pid=$(live_pid "$name" "$file"); then say "$name: running (pid $pid)"; else say "$name: stopped"; fi
    done
    if is_up; then
        sinfo -N -o '%N %P %T %c %m %G'
        squeue
        return 0
    fi
    say "cluster is down (scratch folder $DIR)"
    return 3
}

# --- main ---------------------------------------------------------------------------------------

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }

cmd_install() {
    install -d -m 0755 "$DIR" "$LOGS" "$RUN"
    install_packages
}

main() {
    local cmd=${1:-}
    case $cmd in
        up | down | status | install) ;;
        -h | --help | help) usage; return 0 ;;
        *) usage >&2; return 2 ;;
    esac
    if [[ $cmd != status && $EUID -ne 0 ]]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            exec sudo -n --preserve-env=POSYM_SLURM_DIR,POSYM_SLURM_TIMEOUT "$0" "$@"
        fi
        die "\`$cmd\` needs root (or password-less sudo)"
    fi
    "cmd_$cmd"
}

main "$@"
