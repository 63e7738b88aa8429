#!/usr/bin/env python3
"""The keys of Ultralytics' cfg/default.yaml in file order, for tests/test_trainer.c's args.yaml check.

Owns tests/fixtures/ultralytics_args_keys.txt only. Ultralytics writes args.yaml
from this mapping (yaml_save of vars(args)), so its key order is args.yaml's.
Reads default.yaml from an Ultralytics wheel (the reference 8.3.63) or, with no
argument, from the installed package:

    python3 -m pip download --no-deps ultralytics==8.3.63 -d /tmp/ul
    python3 tools/make_args_keys_fixture.py /tmp/ul/ultralytics-8.3.63-py3-none-any.whl
"""
import os
import sys
import zipfile

import yaml

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "ultralytics_args_keys.txt")


def main():
    if len(sys.argv) > 1:
        with zipfile.ZipFile(sys.argv[1]) as z:
            text = z.read("ultralytics/cfg/default.yaml").decode()
            version = next((n.split("-")[1].removesuffix(".dist") for n in z.namelist() if n.endswith(".dist-info/METADATA")), "?")
    else:
        import ultralytics

        with open(os.path.join(os.path.dirname(ultralytics.__file__), "cfg", "default.yaml")) as f:
            text = f.read()
        version = ultralytics.__version__
    keys = list(yaml.safe_load(text).keys())
    # BaseTrainer adds save_dir to its args before writing them: args.yaml's last key
    keys.append("save_dir")
    with open(OUT, "w") as f:
        f.write(f"# the keys of Ultralytics {version} cfg/default.yaml in order, then save_dir (tools/make_args_keys_fixture.py)\n")
        f.write("\n".join(keys) + "\n")
    print(f"{len(keys)} keys -> {OUT}")


if __name__ == "__main__":
    main()
