#!/usr/bin/env bash
# The one entry point for running tfm: sets up the environment and runs `tfm` subcommands.
#
#   ./launch.sh setup [--accelerator cpu|cuda|tpu]    virtualenv with the jax for this hardware
#                                                      (detected when not given), tfm, the corpus
#   ./launch.sh train --config configs/quickstart.py --workdir workdirs/quickstart
#   ./launch.sh --processes 2 train --config ...      N processes on this machine (jax.distributed
#                                                      on 127.0.0.1; each gets TFM_PROCESS_ID)
#   ./launch.sh --slurm train --config ...            inside sbatch/salloc: one process per SLURM
#                                                      task, ONE TASK PER GPU (template: slurm.sbatch)
#   ./launch.sh --tpu NAME --zone ZONE [--project P] train --config ... --workdir gs://BUCKET/DIR
#                                                      every worker of the TPU VM slice NAME: copies
#                                                      this checkout (git HEAD, uncommitted
#                                                      changes and untracked files that are not
#                                                      ignored), runs setup, then the command
#                                                      (per-host logs: WORKDIR/logs/)
#   ./launch.sh --tpu-worker train ...                what --tpu runs on each worker
# Anything after the mode flags is passed to `tfm` unchanged.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${TFM_VENV:-.venv}

detect_accelerator() {
  if ls /dev/nvidia[0-9]* >/dev/null 2>&1 || { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
    echo cuda
  elif ls /dev/accel[0-9]* >/dev/null 2>&1 || ls /dev/vfio/[0-9]* >/dev/null 2>&1 || [ -n "${TPU_NAME:-}" ]; then
    echo tpu
  else
    echo cpu
  fi
}

setup() {
  local accelerator=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --accelerator) accelerator=${2:-}; shift 2 || usage "--accelerator needs cpu, cuda or tpu" ;;
      --accelerator=*) accelerator=${1#*=}; shift ;;
      *) usage "setup takes --accelerator cpu|cuda|tpu, got '$1'" ;;
    esac
  done
  [ -n "$accelerator" ] || accelerator=$(detect_accelerator)
  case "$accelerator" in
    cpu) extras="test" ;;  # CPU jax; the test suite's extras (CI runs this)
    cuda) extras="cuda" ;;  # jax[cuda12]: the CUDA 12 plugin and its NVIDIA libraries from PyPI
    tpu) extras="tpu" ;;  # jax[tpu]: the libtpu that jax pins
    *) usage "--accelerator: expected cpu, cuda or tpu, got '$accelerator'" ;;
  esac
  echo "launch.sh: setting up $VENV for $accelerator"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -e ".[$extras]"
  # The offline corpus: SWORD Bible modules from Debian (English WEB and KJV, Spanish 1909).
  if ! dpkg-query -W -f='${Status}\n' sword-text-kjv sword-text-web sword-text-sparv 2>/dev/null \
      | grep -c "install ok installed" | grep -qx 3; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        sword-text-kjv sword-text-web sword-text-sparv >/dev/null
    else
      echo "launch.sh: install the offline corpus with: sudo apt-get install sword-text-kjv sword-text-web sword-text-sparv" >&2
    fi
  fi
  echo "launch.sh: environment ready in $VENV ($accelerator: $("$VENV/bin/python" -c 'import jax; print("jax", jax.__version__)'))"
}

# Runs setup and the tfm command on every worker of a TPU VM slice, through gcloud.
tpu_launch() {
  local name=$1 zone=$2 project=$3
  shift 3
  local where=(--zone "$zone")
  [ -z "$project" ] || where+=(--project "$project")
  local archive
  archive=$(mktemp --suffix=.tar)
  if git rev-parse --git-dir >/dev/null 2>&1; then
    # The checkout as it is: HEAD plus uncommitted changes to tracked files (`git stash create`),
    # plus the files git does not track and does not ignore (a new config, say).
    local ref
    ref=$(git stash create 2>/dev/null || true)
    git archive --format=tar -o "$archive" "${ref:-HEAD}"
    git ls-files -z --others --exclude-standard | xargs -0 -r tar -rf "$archive" --
  else
    tar --exclude=./.venv --exclude=./workdirs -cf "$archive" .
  fi
  local quoted
  quoted=$(printf '%q ' "$@")
  gcloud compute tpus tpu-vm scp "$archive" "$name:tfm.tar" --worker=all "${where[@]}"
  rm -f "$archive"
  gcloud compute tpus tpu-vm ssh "$name" --worker=all "${where[@]}" --command \
    "mkdir -p ~/tfm && tar -xf ~/tfm.tar -C ~/tfm && cd ~/tfm && ./launch.sh setup --accelerator tpu && ./launch.sh --tpu-worker $quoted"
}

usage() { echo "launch.sh: $1 (see the comment at the top of launch.sh)" >&2; exit 2; }

mode=local
processes=1
while [ $# -gt 0 ]; do
  case "$1" in
    setup) shift; setup "$@"; exit 0 ;;
    --processes)
      [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage "--processes needs a positive number of processes, got '${2:-}'"
      processes=$2; mode=multiprocess; shift 2 ;;
    --processes=*) usage "write --processes N (a space, not '=')" ;;
    --slurm) mode=slurm; shift ;;
    --tpu)
      [[ "${2:-}" =~ ^[a-z][-a-z0-9]*$ ]] || usage "--tpu needs the TPU VM's name (then --zone ZONE), got '${2:-}'"
      tpu_name=$2; mode=tpu; shift 2 ;;
    --zone) tpu_zone=${2:-}; [ -n "$tpu_zone" ] || usage "--zone needs a zone, e.g. us-central2-b"; shift 2 ;;
    --project) tpu_project=${2:-}; [ -n "$tpu_project" ] || usage "--project needs a project id"; shift 2 ;;
    --tpu-worker) mode=tpu-worker; shift ;;
    *) break ;;
  esac
done
if [ "$mode" = tpu ]; then
  [ -n "${tpu_zone:-}" ] || usage "--tpu $tpu_name needs --zone ZONE"
  [ $# -gt 0 ] || usage "--tpu $tpu_name: which tfm command? e.g. train --config ... --workdir gs://..."
  command -v gcloud >/dev/null || usage "--tpu needs the gcloud CLI (https://cloud.google.com/sdk)"
  tpu_launch "$tpu_name" "$tpu_zone" "${tpu_project:-}" "$@"
  exit $?
fi
[ -x "$VENV/bin/tfm" ] || { echo "launch.sh: run './launch.sh setup' first" >&2; exit 1; }
[ $# -gt 0 ] || { "$VENV/bin/tfm" --help; exit 0; }
# glibc (2.35+) backs its large blocks with transparent huge pages: XLA:CPU's scratch buffer for a
# step is fresh memory every call, and first touching it 4 KiB at a time took 10-17% of a CPU train
# step (experiments/SPEED.md, fourteenth pass). Ignored by older glibc and with THP off; yours wins.
case "${GLIBC_TUNABLES:-}" in
  *glibc.malloc.hugetlb=*) ;;
  *) export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1" ;;
esac

case "$mode" in
  local) exec "$VENV/bin/tfm" "$@" ;;
  multiprocess)
    port=$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    pids=()
    # SIGTERM / SIGINT / SIGHUP (a preemption, Ctrl-C, a closed terminal) go to every worker as
    # SIGTERM: each saves the step they agree on and exits. This shell returns only once every
    # worker has ended, whatever reached it or its process group (a TERM to the whole group also
    # ends the `sleep` below: its status must not end the script), with the first failure's status.
    trap 'kill -TERM "${pids[@]}" 2>/dev/null || true' TERM INT HUP
    for ((i = 0; i < processes; i++)); do
      TFM_COORDINATOR="127.0.0.1:$port" TFM_NUM_PROCESSES=$processes TFM_PROCESS_ID=$i \
        "$VENV/bin/tfm" "$@" &
      pids+=($!)
    done
    # The first process to fail ends the others: they would wait forever in collectives.
    status=0
    declare -A done=()
    while [ ${#done[@]} -lt "$processes" ]; do
      for pid in "${pids[@]}"; do
        [ -n "${done[$pid]:-}" ] && continue
        kill -0 "$pid" 2>/dev/null && continue
        code=0; wait "$pid" || code=$?
        done[$pid]=1
        if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then
          status=$code
          kill -KILL "${pids[@]}" 2>/dev/null || true
        fi
      done
      sleep 0.5 || true
    done
    exit $status ;;
  # The tasks as a job step that SLURM's SIGTERM reaches however the job ends (the time limit, a
  # preemption, scancel): each saves the step they agree on; a preempted job is requeued.
  slurm) exec tfm/slurm_step.sh --kill-on-bad-exit=1 -- env TFM_DISTRIBUTED=auto "$VENV/bin/tfm" "$@" ;;
  tpu-worker) TFM_DISTRIBUTED=auto exec "$VENV/bin/tfm" "$@" ;;
esac
