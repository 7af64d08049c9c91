#!/usr/bin/env bash
# The one entry point for running tfm: sets up the environment and runs `tfm` subcommands.
#
#   ./launch.sh setup                                  virtualenv + package + offline corpus
#   ./launch.sh train --config configs/quickstart.py --workdir workdirs/quickstart
#   ./launch.sh --processes 2 train --config ...      N processes on this machine (jax.distributed
#                                                      on 127.0.0.1; each gets TFM_PROCESS_ID)
#   ./launch.sh --slurm train --config ...            one process per SLURM task (inside sbatch/salloc;
#                                                      jax.distributed reads the SLURM environment)
#   ./launch.sh --tpu train --config ...              on every worker of a TPU VM pod slice; run it on
#                                                      each worker (e.g. gcloud ... ssh --worker=all)
# Anything after the mode flags is passed to `tfm` unchanged.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${TFM_VENV:-.venv}

setup() {
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -e ".[test]"
  # The offline corpus: SWORD Bible modules from Debian (English WEB and KJV, Spanish 1909).
  if [ ! -d /usr/share/sword/modules/texts/ztext/sparv ] && [ ! -d /usr/share/sword/modules/texts/rawtext/sparv ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        sword-text-kjv sword-text-web sword-text-sparv >/dev/null
    else
      echo "launch.sh: install the offline corpus with: sudo apt-get install sword-text-kjv sword-text-web sword-text-sparv" >&2
    fi
  fi
  echo "launch.sh: environment ready in $VENV"
}

usage() { echo "launch.sh: $1 (see the comment at the top of launch.sh)" >&2; exit 2; }

mode=local
processes=1
while [ $# -gt 0 ]; do
  case "$1" in
    setup) setup; exit 0 ;;
    --processes)
      [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage "--processes needs a positive number of processes, got '${2:-}'"
      processes=$2; mode=multiprocess; shift 2 ;;
    --processes=*) usage "write --processes N (a space, not '=')" ;;
    --slurm) mode=slurm; shift ;;
    --tpu) mode=tpu; shift ;;
    *) break ;;
  esac
done
[ -x "$VENV/bin/tfm" ] || { echo "launch.sh: run './launch.sh setup' first" >&2; exit 1; }
[ $# -gt 0 ] || { "$VENV/bin/tfm" --help; exit 0; }

case "$mode" in
  local) exec "$VENV/bin/tfm" "$@" ;;
  multiprocess)
    port=$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    pids=()
    # SIGTERM / SIGINT (a preemption, Ctrl-C) go to every worker: each saves its step and exits.
    trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
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
          kill -KILL "${pids[@]}" 2>/dev/null
        fi
      done
      sleep 0.5
    done
    exit $status ;;
  slurm) exec srun --kill-on-bad-exit=1 env TFM_DISTRIBUTED=auto "$VENV/bin/tfm" "$@" ;;
  tpu) TFM_DISTRIBUTED=auto exec "$VENV/bin/tfm" "$@" ;;
esac
