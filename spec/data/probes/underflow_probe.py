"""torch-CUDA against the spec on the three `underflow` nvfp4 cases a torch-CUDA campaign failed on the H200
(2026-12-02; spec/data/underflow_cases.json): where do CPU and CUDA part? Routing weights (the routing op on the
case's logits), the layer's output at the failing element, and the same with the routing weights fixed to the
CPU's (ids= / weights given to the layer is not an API, so the output is recomputed as Σ_k w_k·y_k from CUDA's
expert outputs).
PYTHONPATH=. python3 spec/data/probes/underflow_probe.py > spec/data/underflow_probe.txt"""

import json
import re
from dataclasses import replace

import numpy as np

from difftest.checking.impl_torch import TORCH, TORCH_CUDA
from difftest.model import generate
from difftest.model.case import Case

for entry in json.load(open("spec/data/underflow_cases.json")):
    case = Case.from_dict(entry["case"])
    t, h = map(int, re.search(r"out\[(\d+), (\d+)\]", entry["message"]).groups())
    inputs = generate.inputs(case)
    routing = replace(case, op="routing", config=case.config.routing)
    r_in = {k: inputs[k] for k in ("logits", "bias") if k in inputs}
    cpu_r, gpu_r = TORCH.run(routing, r_in), TORCH_CUDA.run(routing, r_in)
    cpu, gpu = TORCH.run(case, inputs), TORCH_CUDA.run(case, inputs)
    print(entry["message"])
    print(" logits[t]", inputs["logits"][t])
    print(" ids cpu", cpu_r["ids"][t], "cuda", gpu_r["ids"][t])
    print(" weights cpu", cpu_r["weights"][t].tolist(), "cuda", gpu_r["weights"][t].tolist())
    print(" weight bits cpu", cpu_r["weights"][t].view(np.uint32).tolist(),
          "cuda", gpu_r["weights"][t].view(np.uint32).tolist())
    print(" out[t, h] cpu", float(cpu["out"][t, h]), "cuda", float(gpu["out"][t, h]))
    print(" out[t, :6] cpu", cpu["out"][t, :6].tolist(), "\n             cuda", gpu["out"][t, :6].tolist())
    print()
