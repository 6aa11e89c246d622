/* dcp-vk: Decode Context Parallelism on Vulkan. One header for the whole public API:
 *   status.h    status codes, dcp_last_error()
 *   vk.h        context, devices, buffers, command recording and submission
 *   dtype.h     element types, IEEE half conversion
 *   kv.h        paged KV pools, interleaved DCP placement, the KV cache of a DCP group
 *   attn.h      paged flash-decoding and the log-sum-exp merge on one device
 *   mla.h       MLA latent decode (every head against one latent cache) on one device
 *   comm.h      communicator (all_gather, reduce_scatter, all_to_all, all_reduce), in-process/MPI
 *   dcp.h       the DCP attention step (a2a, ag_rs) over a group
 *   gguf.h      GGUF reader/writer, tensor types, the project's test models
 *   model_config.h  model hyperparameters from GGUF
 *   tokenizer.h SentencePiece and byte-level BPE tokenizers, streaming detokenizer
 *   model.h     llama weights over TP ranks, run state, forward step, sampler */
#ifndef DCPVK_DCPVK_H
#define DCPVK_DCPVK_H

#include "dcpvk/status.h"
#include "dcpvk/vk.h"
#include "dcpvk/dtype.h"
#include "dcpvk/kv.h"
#include "dcpvk/attn.h"
#include "dcpvk/mla.h"
#include "dcpvk/comm.h"
#include "dcpvk/cp.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model_config.h"
#include "dcpvk/tokenizer.h"
#include "dcpvk/model.h"

#endif
