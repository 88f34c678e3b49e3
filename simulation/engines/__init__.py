"""Simulated serving engines (vLLM, SGLang, NIM, Triton TensorRT-LLM, Dynamo, TGI): a scheduler model driven by
request arrivals and coupled to the simulated GPU (`model`), each engine's `/metrics` exactly as upstream serves it
(`expositions`), and their HTTP servers on the loopback (`server`)."""
