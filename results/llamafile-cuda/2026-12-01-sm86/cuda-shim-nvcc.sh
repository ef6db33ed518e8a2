#!/bin/sh
# Written by patchctl: build for sm_86 only. Replaces every -gencode/-arch/-code option the
# calling script passes (llamafile's cuda.sh fixes its own list) with the requested ones, and
# logs each call: patchctl fails a build whose script never came through here.
printf '%s\n' "$*" >> /tmp/lf20/cr/lf.builds/102b2fbd3a249741735410985a7731de8f77cdc4-06104f00a656/cuda-shim/calls.log
skip=0
for arg do
  shift
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  case "$arg" in
    -gencode|--generate-code|-arch|--gpu-architecture|-code|--gpu-code) skip=1; continue ;;
    -gencode=*|--generate-code=*|-arch=*|--gpu-architecture=*|-code=*|--gpu-code=*) continue ;;
  esac
  set -- "$@" "$arg"
done
exec /usr/local/bin/nvcc -gencode arch=compute_86,code=sm_86 "$@"
