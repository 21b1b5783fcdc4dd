"""`trainctl completion bash|zsh`: a shell completion script built from the command line's own parser, so that it
names every command, verb and option there is (issue 44, point 6). zsh runs the bash script through its
bashcompinit, which every zsh ships: no dependency."""

from __future__ import annotations

import argparse
import re

# What a command path or a word must look like to be written into the script unquoted.
_SAFE = re.compile(r"^[A-Za-z0-9_.:=/-]+$")


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "completion",
        help="print a shell completion script: `source <(trainctl completion bash)`, or add it to ~/.bashrc / ~/.zshrc",
    )
    cmd.add_argument("shell", choices=("bash", "zsh"))
    cmd.set_defaults(run=run_completion)


def run_completion(args: argparse.Namespace) -> int:
    from trainctl.cli import build_parser  # the whole parser, this command included

    script = bash_script(command_words(build_parser()))
    if args.shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    print(script, end="")
    return 0


def command_words(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], list[str]]:
    """For every command path (() for `trainctl` itself, ('models', 'promote'), …) the words that may follow it:
    its subcommands, then its options."""
    found: dict[tuple[str, ...], list[str]] = {}
    words: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words.append(name)
                found |= command_words(sub, (*path, name))
        else:
            words += action.option_strings
            if action.choices is not None and not action.option_strings:  # a positional with a few values
                words += [str(choice) for choice in action.choices]
    found[path] = [w for w in words if _SAFE.match(w)]
    return found


def bash_script(words: dict[tuple[str, ...], list[str]]) -> str:
    paths = sorted(words, key=lambda p: (len(p), p))
    known = "|".join(f'"{" ".join(p)}"' for p in paths if p)
    cases = "\n".join(f'        "{" ".join(p)}") words="{" ".join(words[p])}" ;;' for p in paths)
    return f"""# trainctl completion (bash): `source <(trainctl completion bash)`
_trainctl_complete() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" word i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        case "${{path:+$path }}$word" in
            {known}) path="${{path:+$path }}$word" ;;
        esac
    done
    local words=""
    case "$path" in
{cases}
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -o bashdefault -F _trainctl_complete trainctl
"""
