#!/usr/bin/env python3
"""PID 1 of a PID namespace that never reaps orphans, as in containers without an init
(Docker without --init, many Slurm container plugins).

    unshare --pid --fork --mount-proc nonreaping_init.py COMMAND [ARG...]

Starts COMMAND, waits for that one child only and exits with its status. Processes orphaned
inside the namespace are re-parented to this PID 1 and, once dead, stay zombies: nothing here
calls wait() for them (SIGCHLD keeps its default action, which does not reap)."""
import os
import sys

child = os.posix_spawnp(sys.argv[1], sys.argv[1:], os.environ)
_, status = os.waitpid(child, 0)  # this child only
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
