"""The smallest dataflow: a stream of ten numbers, inspected.

Port of timely's ``simple`` example.  ``pt.example`` builds one dataflow on a single worker and
runs it to completion; ``to_stream`` emits the iterable at time 0 and ``inspect`` looks at each
record as it flows past.

    $ python examples/simple.py          # seen: 0 ... seen: 9
    $ python examples/simple.py 20       # seen: 0 ... seen: 19
"""

import pytimely as pt

if __name__ == "__main__":
    words = pt.args()
    count = int(words[0]) if words else 10
    pt.example(lambda scope: scope.to_stream(range(count)).inspect(lambda x: print(f"seen: {x}")))
