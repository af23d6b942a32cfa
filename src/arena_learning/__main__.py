"""``python -m arena_learning`` and the ``arena`` command: the garbage collector set for a run, the CPU kernel pin, then
the CLI."""

import gc
import sys


def main() -> None:
    """Run the command line with the collector set for a run's heap."""
    # A command allocates hundreds of thousands of small objects that live to its end (prompts, answers,
    # judgments, ledger rows): at the default thresholds (700, 10, 10) the collector walks that growing heap
    # hundreds of times, 0.3-0.4 s of `arena battle`'s 1.5 s on arena-hard (measured). Reference counting
    # frees nearly everything; cycles are rare, and still collected, every 50,000 allocations.
    gc.set_threshold(50_000, 20, 10)
    # torch's CPU kernels at AVX2 on every x86-64 machine, before torch computes anything: the same weights trained
    # on a machine with AVX-512 as on one without (cpu_isa; ARENA_CPU_ISA=native opts out). The command sets it for
    # its own process and the training processes it starts; importing the package sets nothing.
    from .cpu_isa import pin_cpu_isa

    pin_cpu_isa()
    from .cli.listing import print_listing, wants_listing

    if wants_listing(sys.argv[1:]):  # `arena`, `arena --help`: the commands listed without importing them
        print_listing(sys.argv[1:])
        return
    from .cli import app

    gc.freeze()  # what the imports made (modules, classes) lives as long as the process: never walked again
    app()


if __name__ == "__main__":
    main()
