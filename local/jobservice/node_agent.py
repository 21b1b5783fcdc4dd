"""The per-node agent: runs one replica's command as its child and records how it ended.

Usage: python node_agent.py EXIT_FILE -- COMMAND [ARGS...]

The JobService starts this file (by path, so it imports nothing from the project and starts fast) as
the leader of the replica's process group. The exit status file lets a restarted JobService learn how a
replica it did not start ended; the agent exits with the same status, as a container would (128 + N
when the command died of signal N, 127 when the command does not exist).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    exit_file, command = argv[0], argv[2:]
    # SIGTERM goes to the whole group; the command decides what to do with it, and we wait to record
    # its status. SIGKILL after the grace period ends us both.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        child = subprocess.Popen(command)
    except OSError as error:
        print(f"[node agent] cannot start {command[0]!r}: {error}", file=sys.stderr, flush=True)
        status = 127
    else:
        returncode = child.wait()
        status = returncode if returncode >= 0 else 128 - returncode
    temporary = f"{exit_file}.tmp"
    with open(temporary, "w") as handle:
        handle.write(str(status))
    os.replace(temporary, exit_file)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
