import sys

from .cli import run

if __name__ == "__main__":  # not when a worker process that was spawned imports it again
    sys.exit(run())
