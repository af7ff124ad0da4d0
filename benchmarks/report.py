"""What every benchmark does with its markdown report: print it, and write it to ``--out`` if given."""


def publish(text, out=None):
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
