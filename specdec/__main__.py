"""``python -m specdec demo | forcing | pilot``."""

from __future__ import annotations

import sys

COMMANDS = {
    "demo": "AR vs speculative decoding of HumanEval prompts on the real SmolLM2-135M model (CPU)",
    "forcing": "token-forcing check of speculative decoding against AR on the real model",
    "pilot": "profile, explore, gate and integrate decode-system changes; writes a spec, a memory and a report",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        help_asked = argv[:1] in (["-h"], ["--help"])
        if argv and not help_asked:
            print(f"command: expected one of {', '.join(COMMANDS)}, got {argv[0]!r}\n", file=sys.stderr)
        print("usage: python -m specdec {" + ",".join(COMMANDS) + "} [options]\n")
        for name, text in COMMANDS.items():
            print(f"  {name:10} {text}")
        return 0 if help_asked else 2
    command, rest = argv[0], argv[1:]
    if command == "demo":
        from specdec.demo import main as demo_main

        return demo_main(rest)
    if command == "pilot":
        from specdec.pilot.cli import main as pilot_main

        return pilot_main(rest)
    from specdec.cli_forcing import main as forcing_main

    return forcing_main(rest)


if __name__ == "__main__":
    sys.exit(main())
