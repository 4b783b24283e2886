"""Streaming multiprocessors per GPU type: what a communication kernel that holds some of them takes from compute.

Used where an all-to-all runs as GPU kernels on a fixed number of SMs beside the computation it is hidden behind
(DeepEP, costmodel._experts.comm_sm_fraction). Counts of the SXM parts, from the vendors' architecture documents:
    A100 (and A800, the same die): 108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020, "108 SMs").
    H100 SXM5 (and H800, H200, the 96 GB H100: the same GH100 configuration): 132 SMs (NVIDIA H100 Tensor Core GPU
        Architecture whitepaper, 2022: "132 SMs" for the SXM5 board).
    B200 (and GB200's): 148 SMs (NVIDIA Blackwell architecture technical brief: two dies of 74 SMs each).
    GB300 (Blackwell Ultra): 160 SMs (NVIDIA technical blog "Inside NVIDIA Blackwell Ultra", 2025: 160 SMs).
    MI300X: 304 compute units (AMD Instinct MI300X data sheet).
A GPU not listed counts as the H100's 132.
"""

from __future__ import annotations

DEFAULT_SMS = 132
SMS = {
    "A100-SXM4-40GB": 108, "A100-SXM4-80GB": 108, "A800-SXM4-80GB": 108,
    "H100-SXM5-80GB": 132, "H100-SXM5-96GB-500W": 132, "H800-SXM5-80GB": 132, "H200-SXM-141GB": 132,
    "B200-HGX-180GB": 148, "B300-HGX-288GB": 160, "GB200-NVL72-186GB": 148, "GB300-NVL72-279GB": 160,
    "MI300X-OAM-192GB": 304,
}


def streaming_multiprocessors(gpu_name: str) -> int:
    """SMs (compute units) of the GPU type named ``gpu_name`` (SMS; DEFAULT_SMS where it is not listed)."""
    return SMS.get(gpu_name, DEFAULT_SMS)
