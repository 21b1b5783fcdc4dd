"""One node of a running job: a process group led by the node agent (node_agent.py), started by this
server or adopted from a previous one, with its output in `logs/<node>.log` and its exit status in
an exit file the agent writes."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from local.jobservice.replicas import NodePlan
from local.processes import process_alive

NODE_AGENT = Path(__file__).with_name("node_agent.py")


@dataclass
class Node:
    """One running node: started by us (`popen`) or adopted after a restart (only `pid`)."""

    name: str
    pid: int
    exit_file: Path
    popen: subprocess.Popen | None = None

    def wait(self) -> int:
        if self.popen is not None:
            returncode = self.popen.wait()
            return returncode if returncode >= 0 else 128 - returncode
        while process_alive(self.pid) and not self.exit_file.exists():
            time.sleep(0.2)
        try:
            return int(self.exit_file.read_text())
        except (FileNotFoundError, ValueError):
            return 137  # ended without a recorded status: killed along with its agent


def start_node(node: NodePlan, attempt: int, log_dir: Path, exit_dir: Path, workdir: Path) -> Node:
    """Start `node` for `attempt` of its job, appending its output to its log."""
    node.home.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"{node.name}.log", "ab") as output:
        # A long word (trainctl's secret launcher's source, say) is shown by its length.
        shown = [part if len(part) <= 200 else f"<{len(part)} characters>" for part in node.command]
        output.write(f"[local JobService] attempt {attempt}: {shown}\n".encode())
        output.flush()
        exit_file = exit_dir / f"{node.name}.exit"
        popen = subprocess.Popen(
            [sys.executable, str(NODE_AGENT), str(exit_file), "--", *node.command],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=node.env,
            cwd=workdir,
            start_new_session=True,
        )
    return Node(node.name, popen.pid, exit_file, popen)
