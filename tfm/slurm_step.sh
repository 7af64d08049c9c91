#!/usr/bin/env bash
# Runs COMMAND as a SLURM job step from a batch script, so that however SLURM ends the job, the
# step's tasks get a SIGTERM they can save their step at, and a preempted job comes back.
#
#   tfm/slurm_step.sh [SRUN OPTIONS...] -- COMMAND [ARGS...]
#
# launch.sh --slurm (slurm.sbatch) and the array tasks of `tfm sweep --slurm` run their tasks
# through it. Why srun is not simply exec'd as the batch shell: srun takes a SIGTERM of its own as
# "abort the step" and SIGKILLs its tasks at once ("srun: forcing job termination"), so no task
# could save. SLURM signals
#   - the job's steps alone for the --signal time limit and at the start of a preemption's grace
#     time: the tasks get SIGTERM, srun (in the batch step) does not;
#   - the batch step as well for `scancel --full --signal=TERM`, a plain `scancel` and the end of a
#     grace time: the batch shell and the processes SLURM tracks with it.
# So srun runs in a session (and process group) of its own, which a signal to the batch step does
# not reach (proctrack/cgroup sends signals other than SIGKILL only to the batch shell itself,
# proctrack/pgid to its process group), and this shell, on SIGTERM, passes it on to the job's
# steps (`scancel --signal=TERM JOB`, which spares the batch step) and waits for srun to end. With
# proctrack/linuxproc, which signals every descendant of the batch step, srun still gets it.
#
# A preempted job's step has saved and ended before the grace time is over; the job would then end
# as COMPLETED and never be requeued, so this shell requeues it (scontrol requeue) and it resumes
# from its checkpoint when the node is free again. The exit status is srun's.
set -uo pipefail

srun_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  srun_args+=("$1")
  shift
done
if [ $# -lt 2 ]; then
  echo "slurm_step.sh: expected [SRUN OPTIONS...] -- COMMAND [ARGS...], got no command" >&2
  exit 2
fi
shift
if [ -z "${SLURM_JOB_ID:-}" ]; then
  echo "slurm_step.sh: SLURM_JOB_ID is not set: run it from a batch script (sbatch), not directly" >&2
  exit 2
fi

forward() {
  echo "slurm_step.sh: SIGTERM: passed on to the job's steps (scancel --signal=TERM $SLURM_JOB_ID)" >&2
  scancel --signal=TERM "$SLURM_JOB_ID" || true
}
trap forward TERM

setsid srun ${srun_args[@]+"${srun_args[@]}"} "$@" &
step=$!
# `wait` returns early when the trap runs; the step is over only once srun has exited.
while kill -0 "$step" 2>/dev/null; do
  wait "$step"
done
wait "$step"
status=$?
trap - TERM

if scontrol show job "$SLURM_JOB_ID" 2>/dev/null | grep -q "PreemptTime=[0-9]"; then
  echo "slurm_step.sh: job $SLURM_JOB_ID was preempted: requeued, it resumes from its last checkpoint" >&2
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
