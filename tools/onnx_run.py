#!/usr/bin/env python3
"""Checks an ONNX model against the spec (onnx.checker, full check: types and
shapes inferred through every node), then runs it in ONNX Runtime (CPU) on one
raw float32 input, for the export tests (tests/test_export.c):
MODEL.onnx IN.bin N,C,H,W OUT.bin. Writes the first output as raw float32
and prints its shape (comma-separated)."""
import sys

import numpy as np
import onnx
import onnxruntime as ort


def main():
    model, src, shape, dst = sys.argv[1:5]
    onnx.checker.check_model(onnx.load(model), full_check=True)
    x = np.fromfile(src, dtype=np.float32).reshape([int(d) for d in shape.split(",")])
    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    y = s.run(None, {s.get_inputs()[0].name: x})[0]
    np.ascontiguousarray(y, dtype=np.float32).tofile(dst)
    print(",".join(str(d) for d in y.shape))


if __name__ == "__main__":
    main()
