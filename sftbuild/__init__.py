"""sftbuild: verified SFT datasets and RLVR task sets of GPU kernels (CUDA C++ and Triton).

The pipeline is the stage table in `sftbuild.stages`; the command line is `sftbuild.cli`.
"""
