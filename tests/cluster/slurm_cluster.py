"""A one-node SLURM cluster on this host, for the tests: munged, slurmctld and slurmd in a temp dir.

Everything lives under one directory: the munge key and socket, slurm.conf (slurmctld and slurmd on
127.0.0.1, on ports free when it starts), their state, spool, logs and pid files. The node has the
CPUs given (default 2), authenticates with munge, tracks processes by process group (proctrack/pgid:
like proctrack/cgroup, which real clusters use, a signal to the batch step reaches the batch shell
and not the srun it starts in a session of its own; proctrack/linuxproc signals every descendant),
binds no tasks (task/none) and keeps no accounting, so nothing needs cgroups or a database. Two
partitions on the node: `low` (the default) and `high`, whose jobs preempt `low`'s: SIGTERM at
once, then requeued by SLURM after GRACE_S s at the latest.
Clients find it through SLURM_CONF (environment()). The daemons run in the foreground as children
of the test process and are stopped by their pids.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

PACKAGES = "slurm-wlm munge"  # Debian's packages with every binary below
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "srun")


GRACE_S = 30  # a preempted job's time between SIGTERM and SIGKILL (the partition's GraceTime)
SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/local/sbin"])


def binary(name: str) -> str | None:
  """The path of a SLURM or munge program (daemons live in sbin, which a user's PATH may lack)."""
  return shutil.which(name, path=SEARCH)


def missing_binaries() -> list[str]:
  return [b for b in BINARIES if binary(b) is None]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def slurm_conf(root: pathlib.Path, cpus: int, host: str) -> str:
  """slurm.conf of a one-node cluster named after this host, whose files all live under root.

  The node's name is the host name, as on a real cluster: jax.distributed reads its coordinator's
  address from SLURM's node list."""
  return "\n".join([
      f"ClusterName=tfmtest{os.getpid()}",
      f"SlurmctldHost={host}(127.0.0.1)",
      f"SlurmctldPort={_free_port()}",
      f"SlurmdPort={_free_port()}",
      "SlurmUser=root",
      "SlurmdUser=root",
      "AuthType=auth/munge",
      "CredType=cred/munge",
      f"AuthInfo=socket={root / 'munge.socket'},cred_expire=5",  # requeued jobs wait this long (default 120 s)
      f"StateSaveLocation={root / 'state'}",
      f"SlurmdSpoolDir={root / 'spool'}",
      f"SlurmctldPidFile={root / 'slurmctld.pid'}",
      f"SlurmdPidFile={root / 'slurmd.pid'}",
      f"SlurmctldLogFile={root / 'slurmctld.log'}",
      f"SlurmdLogFile={root / 'slurmd.log'}",
      "ProctrackType=proctrack/pgid",
      "TaskPlugin=task/none",
      "SwitchType=switch/none",
      "MpiDefault=none",
      "JobAcctGatherType=jobacct_gather/none",
      "AccountingStorageType=accounting_storage/none",
      "JobCompType=jobcomp/none",
      "SchedulerType=sched/backfill",
      "SelectType=select/cons_tres",
      "SelectTypeParameters=CR_CPU",
      "ReturnToService=2",
      "SchedulerParameters=sched_interval=2,bf_interval=2",
      "MessageTimeout=20",
      "KillWait=30",  # SLURM's default: a plain scancel's SIGTERM to SIGKILL
      "InactiveLimit=0",
      "MinJobAge=600",  # finished jobs stay visible to squeue/scontrol (and requeue) for 10 minutes
      "SlurmctldDebug=info",
      "SlurmdDebug=info",
      f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
      # Preemption as on a shared cluster: a job in `high` requeues the `low` jobs it needs the CPUs
      # of, after their grace time (SIGCONT and SIGTERM at its start; SIGKILL at its end).
      "PreemptType=preempt/partition_prio",
      "PreemptMode=REQUEUE",
      f"PartitionName=low Nodes={host} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 "
      f"PreemptMode=REQUEUE GraceTime={GRACE_S}",
      f"PartitionName=high Nodes={host} MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF",
      ""])


class Cluster:
  """munged, slurmctld and slurmd under `root`; start() returns once the node is idle."""

  def __init__(self, root: pathlib.Path, cpus: int = 2):
    self.root, self.cpus = pathlib.Path(root), cpus
    self.node = socket.gethostname().split(".")[0]
    self.conf = self.root / "slurm.conf"
    self.daemons: dict[str, subprocess.Popen] = {}

  def environment(self) -> dict[str, str]:
    """What clients (sbatch, squeue, srun inside jobs) need to find this cluster."""
    return {"SLURM_CONF": str(self.conf)}

  def _spawn(self, name: str, argv: list[str]) -> None:
    log = open(self.root / f"{name}.out", "w", encoding="utf-8")
    self.daemons[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                          env={**os.environ, **self.environment()})
    log.close()

  def start(self, timeout: float = 60) -> None:
    try:  # jax.distributed finds its coordinator by the node's name in SLURM's node list
      socket.gethostbyname(self.node)
    except OSError as e:
      raise RuntimeError(f"this host's name {self.node!r} does not resolve ({e}); the test cluster's "
                         "node is named after it: add it to /etc/hosts") from None
    for d in ("state", "spool", "munge"):
      (self.root / d).mkdir(parents=True, exist_ok=True)
    key = self.root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    self.conf.write_text(slurm_conf(self.root, self.cpus, self.node))
    self._spawn("munged", [binary("munged"), "--foreground", "--force", f"--key-file={key}",
                           f"--socket={self.root / 'munge.socket'}",
                           f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                           f"--log-file={self.root / 'munge' / 'munged.log'}",
                           f"--seed-file={self.root / 'munge' / 'munged.seed'}"])
    self._wait(lambda: (self.root / "munge.socket").exists(), timeout, "munged's socket")
    self._spawn("slurmctld", [binary("slurmctld"), "-D", "-c", "-i", "-f", str(self.conf)])
    self._spawn("slurmd", [binary("slurmd"), "-D", "-f", str(self.conf)])
    self._wait(self.node_idle, timeout, f"node {self.node} to be idle")

  def node_idle(self) -> bool:
    proc = subprocess.run(["sinfo", "--noheader", "--nodes", self.node, "--format=%T"],
                          capture_output=True, text=True, env={**os.environ, **self.environment()},
                          check=False)
    return proc.returncode == 0 and proc.stdout.strip() == "idle"

  def _wait(self, ready, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not ready():
      dead = [n for n, p in self.daemons.items() if p.poll() is not None]
      if dead or time.monotonic() > end:
        self.stop()
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}"
                         for p in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.out")))
        raise RuntimeError(f"the test cluster never got {what}"
                           + (f" ({', '.join(dead)} exited)" if dead else "") + "\n" + logs)
      time.sleep(0.2)

  def _cancel_jobs(self, timeout: float = 30) -> None:
    """Every job still queued or running (a failed test's), so that no job step outlives slurmd."""
    env = {**os.environ, **self.environment()}
    run = lambda *argv: subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if run("scancel", f"--user={os.getuid()}").returncode != 0:
      return
    end = time.monotonic() + timeout
    while run("squeue", "--noheader").stdout.strip() and time.monotonic() < end:
      time.sleep(0.5)

  def stop(self) -> None:
    """Cancels what is left, then stops slurmd, slurmctld, munged in that order, each by its pid
    (SIGTERM, then SIGKILL)."""
    if all(self.daemons.get(n) is not None and self.daemons[n].poll() is None
           for n in ("slurmctld", "slurmd", "munged")):
      self._cancel_jobs()
    for name in ("slurmd", "slurmctld", "munged"):
      proc = self.daemons.pop(name, None)
      if proc is None or proc.poll() is not None:
        continue
      proc.send_signal(signal.SIGTERM)
      try:
        proc.wait(timeout=20)
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
