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
# A SIGTERM that comes before srun is started means no step is run at all (the job was ended
# before it trained); one that comes after, before the step's tasks exist on this node, reached no
# task, and is passed on again once they do (a task that has not yet set its handler ends at it:
# it had nothing to save).
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

termed=0    # a SIGTERM came
delivered=0 # and was passed on while tasks of the job's step ran here
forward() {
  termed=1
  echo "slurm_step.sh: SIGTERM: passed on to the job's steps (scancel --signal=TERM $SLURM_JOB_ID)" >&2
  if tasks_here; then
    delivered=1
  fi
  scancel --signal=TERM "$SLURM_JOB_ID" || true
}
tasks_here() {  # processes of a step of this job other than the batch and extern steps run here
  scontrol listpids "$SLURM_JOB_ID" 2>/dev/null \
    | awk 'NR > 1 && $3 != "batch" && $3 != "extern" && $3 != "-"' | grep -q .
}
trap forward TERM

if [ "$termed" = 1 ]; then
  echo "slurm_step.sh: SIGTERM before the step started: not starting it" >&2
  status=0
else
  setsid srun ${srun_args[@]+"${srun_args[@]}"} "$@" &
  step=$!
  # `wait` returns early when the trap runs; the step is over only once srun has exited.
  while kill -0 "$step" 2>/dev/null; do
    if [ "$termed" = 1 ] && [ "$delivered" = 0 ]; then
      if tasks_here; then
        echo "slurm_step.sh: the step started after the SIGTERM: passed on to it now" >&2
        delivered=1
        scancel --signal=TERM "$SLURM_JOB_ID" || true
      fi
      sleep 0.5 || true
    else
      wait "$step"
    fi
  done
  wait "$step"
  status=$?
fi
trap - TERM

if scontrol show job "$SLURM_JOB_ID" 2>/dev/null | grep -q "PreemptTime=[0-9]"; then
  echo "slurm_step.sh: job $SLURM_JOB_ID was preempted: requeued, it resumes from its last checkpoint" >&2
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
