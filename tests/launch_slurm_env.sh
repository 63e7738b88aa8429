#!/bin/sh
# tests/launch_slurm_env.sh N PORT CMD... — starts N copies of CMD with the
# variables Slurm's srun gives its tasks (SLURM_PROCID, SLURM_NTASKS,
# SLURM_LOCALID, SLURM_JOB_ID, SLURM_STEP_ID) and MASTER_ADDR/MASTER_PORT as
# a batch script exports them:
# no MPI and no launcher's store, so the ranks meet at the one rank 0 serves.
# Exits with the first failing copy's status (0 when all succeed).
n=$1
port=$2
shift 2
pids=""
r=0
while [ "$r" -lt "$n" ]; do
  SLURM_PROCID=$r SLURM_NTASKS=$n SLURM_LOCALID=$r SLURM_JOB_ID=$$ SLURM_STEP_ID=0 MASTER_ADDR=localhost MASTER_PORT=$port "$@" &
  pids="$pids $!"
  r=$((r + 1))
done
rc=0
for p in $pids; do
  wait "$p"
  s=$?
  [ "$rc" -eq 0 ] && rc=$s
done
exit "$rc"
