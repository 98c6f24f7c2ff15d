"""QLoRA's frozen base as bitsandbytes lays it out on the LLM fixtures: loads testdata/llm/<family> with
BitsAndBytesConfig(load_in_4bit, nf4, double quantization, bf16 compute) on CPU and adds up what stays in bf16
and the NF4 layers' bytes (4 bits a parameter, a byte of absmax per block of 64, 4 bytes per 256 blocks), per
tensor. transformers 5 converts nn.Linear modules only: a mixture of experts' fused expert stacks (3-D
parameters) and bare router weights stay in bf16. Needs bitsandbytes (requirements-compare.txt).

    python3 tools/llm/measure_qlora_base.py qwen3_moe mixtral deepseek_v3 ...

The figures are in tests/llm.rs (`qlora_keeps_fused_experts_in_bf16`).
"""
import torch, math
from transformers import BitsAndBytesConfig, AutoModelForCausalLM
q=BitsAndBytesConfig(load_in_4bit=True,bnb_4bit_quant_type="nf4",bnb_4bit_use_double_quant=True,bnb_4bit_compute_dtype=torch.bfloat16)
import sys
for fam in sys.argv[1:]:
    m=AutoModelForCausalLM.from_pretrained(f"testdata/llm/{fam}",quantization_config=q,dtype=torch.bfloat16,device_map="cpu")
    tot=0; n4=0; nb=0
    for n,p in m.named_parameters():
        if type(p).__name__=="Params4bit":
            qs=p.quant_state; numel=qs.shape.numel(); n4+=numel
            blocks=math.ceil(numel/64)
            tot+=math.ceil(numel/2)+blocks+math.ceil(blocks/256)*4
        else:
            nb+=p.numel(); tot+=p.numel()*p.element_size()
    for n,b in m.named_buffers():
        pass
    print(fam, "nf4 params", n4, "bf16 params", nb, "base bytes (nf4_bytes per tensor)", tot)
