/* What every model graph shares, whatever its architecture: the placement of the TP ranks held
 * here, the replicated weights (embedding, final norm, output head), the run state's per-rank
 * residual stream and step inputs and outputs, the communicators (TP group, DCP groups), the KV
 * caches (one per layer and DCP group; their shape comes from the architecture), the step over
 * the ranks held here, the rows of a step, and the recording blocks every graph uses: embed,
 * rmsnorm (with the pending all-reduce's sum), all-reduce, head.
 *
 * An architecture (arch/llama.c, arch/deepseek2.c) fills a dcp_arch_ops: its per-rank layer
 * weights, its run-state part, and the recording of one layer, which calls the blocks below.
 *
 * The forward pass of one step reads top to bottom (graph_step.c):
 *   prepare rows (host: ids, RoPE angles, KV slots, attention rows)
 *   embed
 *   per layer: the architecture's attention block, all-reduce, its FFN block, all-reduce
 *   head (rows with logits)
 * With TP > 1 each row-parallel projection writes the rank's `part`; dcp_graph_all_reduce puts it
 * into the TP communicator's put area and ends the round; the next dcp_graph_norm of every rank
 * adds the parts to x in rank order first (rmsnorm_parts: bitwise the same x on every rank).
 *
 * Over MPI (ranks [first, first + nl) of the group) the arrays hold this process's ranks only. */
#ifndef DCP_MODEL_GRAPH_H
#define DCP_MODEL_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/attn.h"
#include "dcpvk/comm.h"
#include "dcpvk/cp.h"
#include "dcpvk/kv.h"
#include "dcpvk/model.h"
#include "model/load.h"
#include "dcpvk/ops.h"
#include "step/step.h"

typedef struct dcp_arch_ops dcp_arch_ops;
typedef struct dcp_prefix_cache dcp_prefix_cache; /* prefix.c */

/* ---- the model (weights) ------------------------------------------------------------------- */

/* Weights every architecture has, per rank held here. */
typedef struct dcp_graph_rank_weights {
    dcp_device *dev;
    dcp_matrix tok_embd;  /* [n_vocab][n_embd] */
    dcp_matrix output;    /* [n_vocab][n_embd] (first rank held only) */
    dcp_buffer *out_norm; /* [n_embd] f32 */
} dcp_graph_rank_weights;

struct dcp_model {
    dcp_model_config cfg;
    const dcp_arch_ops *ops;
    uint32_t tp, dcp;                /* TP and DCP sizes of the whole group */
    bool q_replicate;
    uint32_t first, nl;              /* TP ranks held here: [first, first + nl) (one process: 0, tp) */
    dcp_graph_rank_weights *ranks;   /* [nl]: ranks[i] is TP rank first + i */
    void *arch;                      /* the architecture's weights (its ops own them) */
    uint64_t bytes;                  /* device bytes of every rank's weights */
    uint64_t file_bytes;             /* bytes of the file(s) read for the ranks held here */
    float *rope_freqs;               /* [n_rot/2] f32 RoPE frequency factors (rope_freqs.weight,
                                      * Llama 3.x) or NULL */
    uint64_t *rank_bytes;            /* [nl] device bytes of each rank's weights */
    uint64_t *rank_largest;          /* [nl] the largest weight buffer of each rank */
    bool count_only;                 /* loaded with count_only: no device memory */
    dcp_model_fallback fallback;     /* matrices held as F32 (dcp_model_fallbacks) */
};

/* ---- the run state ------------------------------------------------------------------------- */

typedef struct dcp_graph_rank {
    dcp_device *dev;
    uint32_t g, gr;                  /* DCP group (among those held here) and rank inside it */
    uint32_t gl;                     /* index among the group's ranks held here (its caches' local rank) */
    dcp_buffer *x;                   /* [max_rows][n_embd] f32: the residual stream */
    dcp_buffer *xn;                  /* [max_rows][n_embd] f32: normed */
    dcp_buffer *part;                /* [max_rows][n_embd] f32: row-parallel partial output (TP > 1) */
    dcp_buffer *xo;                  /* [max_out][n_embd] f32: normed rows with logits (first rank) */
    dcp_buffer **slots;              /* [n_layer] host-visible [max_rows] u32 KV slots (DCP_KV_NO_SLOT:
                                      * another rank stores the token) */
    dcp_buffer *ids, *cs;            /* host-visible inputs: [max_rows] u32, [max_rows][rope_pairs][2] f32 */
    dcp_buffer *logits, *next;       /* host-visible outputs [max_out][n_vocab] f32, [max_out] u32 */
} dcp_graph_rank;

struct dcp_model_state {
    dcp_model *m;
    dcp_model_state_config cfg;
    uint32_t max_blocks;             /* block-table entries per sequence and rank */
    uint32_t max_out;                /* rows with logits per step at most */
    uint32_t rope_pairs;             /* (cos, sin) pairs per row in cs */
    dcp_graph_rank *r;               /* [nl] */
    uint32_t ng, gn;                 /* DCP groups held here (wholly or in part), ranks of each held
                                      * here (one process: tp / dcp and dcp; dcp = 1: nl and 1) */
    dcp_comm *comm;                  /* TP group (tp > 1) */
    dcp_comm **gcomm;                /* [ng] DCP group communicators (dcp > 1) */
    dcp_kv_cache **caches;           /* [n_layer][ng] */
    dcp_step *step;                  /* rounds over the nl ranks held here */
    /* the step being recorded */
    uint32_t rows;                   /* rows of the step */
    uint32_t *row_seq;               /* [max_rows] sequence of each row */
    uint64_t *row_len;               /* [max_rows] global length each row attends over (position + 1) */
    uint32_t *row_pos;               /* [max_rows] position of each row */
    uint32_t n_out;                  /* rows with logits */
    uint32_t *out_row;               /* [max_out] their row indices */
    uint32_t ar_tokens;              /* > 0: an all-reduce of that many rows awaits its sum (norm) */
    /* scratch for the attention rows of DCP = 1 plans: */
    uint32_t *lens;                  /* [max_rows] */
    uint32_t *bt;                    /* [max_rows][max_blocks] */
    uint32_t *seq_len;               /* [max_seqs] tokens held per sequence */
    uint32_t *seq_add;               /* [max_seqs] scratch: tokens a step adds */
    uint32_t *run_seq, *run_count;   /* [max_rows] scratch: the step's runs of rows per sequence */
    dcp_model_row *fwd_rows;         /* [max_rows] scratch of dcp_model_state_forward */
    dcp_prefix_cache *prefix;        /* automatic prefix caching (prefix.c), NULL: off */
    struct dcp_fork_state *fork;     /* forks of sequences (fork.c), NULL until the first */
    /* statistics */
    uint64_t tokens_run;
    void *arch;                      /* the architecture's run state (its ops own it) */
};

/* ---- an architecture ----------------------------------------------------------------------- */

struct dcp_arch_ops {
    const char *name;
    /* Checks the configuration against the architecture's rules (heads, TP, DCP), before any
     * upload: DCP_ERR_CONFIG / DCP_ERR_UNSUPPORTED with a message. */
    dcp_status (*check)(const dcp_model *m, const dcp_gguf *g);
    /* Loads the layers of every rank held here into m->arch (load context lc). */
    dcp_status (*load)(dcp_model *m, dcp_load_ctx *lc);
    /* Whether load with lc->count_only reads and uploads nothing (then the progress total is
     * counted by such a pass first); deepseek2's slices and uploads as a real load does. */
    bool count_only_cheap;
    void (*unload)(dcp_model *m);
    /* The KV pool of a rank (kv_heads, head_dim; the state sets page size, dtype and pages). */
    void (*kv_pool)(const dcp_model *m, uint32_t local, dcp_kv_pool_config *pool);
    /* Creates s->arch (the caches, communicators and step exist). */
    dcp_status (*state_create)(dcp_model_state *s);
    /* Adds to *mem what state_create allocates on local rank i for config c (defaults applied;
     * kc: the rank's KV cache config, as create_cache makes it) and raises *dcp_block to the block
     * its DCP steps reserve in the group communicator. Allocates nothing. */
    dcp_status (*state_bytes)(const dcp_model *m, uint32_t i, const dcp_model_state_config *c,
                              const dcp_kv_cache_config *kc, dcp_model_memory *mem, uint64_t *dcp_block);
    void (*state_destroy)(dcp_model_state *s);
    /* Host side of a step after the KV appends: every attention's rows (s->rows, row_seq, row_len). */
    dcp_status (*set_rows)(dcp_model_state *s);
    /* What a step's recording depends on besides the rows (attention plans' keys). */
    uint64_t (*key)(const dcp_model_state *s);
    /* Record layer l's attention block and FFN block over every rank: each ends with the
     * row-parallel projection into the residual (one rank) or into `part` (the graph's all-reduce
     * follows each block). */
    dcp_status (*attention)(dcp_model_state *s, uint32_t l);
    dcp_status (*ffn)(dcp_model_state *s, uint32_t l);
};

extern const dcp_arch_ops dcp_arch_llama; /* llama, and its variants qwen2, qwen3, phi3 (arch/llama.c) */
extern const dcp_arch_ops dcp_arch_deepseek2; /* MLA attention and MoE (arch/deepseek2.c) */

/* Adds a buffer of `bytes` to the field *field of mem (and the largest buffer when it is). */
void dcp_graph_count(dcp_model_memory *mem, uint64_t *field, uint64_t bytes, const char *what);

/* ---- page accounting (pages.c) ------------------------------------------------------------- */

/* Pages of a sequence's shard of `length` tokens on DCP rank r (N ranks, pages of B tokens,
 * interleave I). */
uint32_t dcp_graph_shard_pages(uint32_t N, uint32_t B, uint32_t I, uint64_t length, uint32_t r);
/* DCP_ERR_OUT_OF_PAGES unless growing sequence q by adds[q] tokens (every q < max_seqs) fits in
 * the pools of every rank of a DCP group (placement formulas: the same answer on every process). */
dcp_status dcp_graph_check_pages(const dcp_model_state *s, const uint32_t *adds);
/* After dcp_graph_check_pages: evicts the unreferenced cached blocks (LRU) whose pages the step
 * needs, so that every rank's free list holds the step's new pages. */
dcp_status dcp_graph_make_room(dcp_model_state *s, const uint32_t *adds);
/* Pages on the free lists of the worst rank now (not counting the reclaimable cached blocks). */
uint32_t dcp_graph_pages_free_now(const dcp_model_state *s);
/* Pages on rank r's free lists now. */
uint32_t dcp_graph_rank_free_now(const dcp_model_state *s, uint32_t r);
/* Runs the copy commands cmd[L] of the local ranks L < nloc with rec[L] set, each after a barrier
 * (toward the host when host, else toward the next step's shaders), side by side on their
 * devices' queues (run: nloc entries of scratch), waits, resets them and clears rec. Page copies of
 * the prefix cache's offload (prefix.c) and of forks (fork.c). */
dcp_status dcp_graph_run_copies(dcp_cmd **cmd, bool *rec, dcp_cmd **run, uint32_t nloc, bool host);

/* ---- automatic prefix caching (prefix.c) -------------------------------------------------- */

/* Token `token` at position pos of sequence seq (a row of a step; nothing when caching is off). */
void dcp_graph_prefix_record(dcp_model_state *s, uint32_t seq, uint32_t pos, int32_t token);
/* Leading global blocks of seq that are cache entries (0 when off). */
uint32_t dcp_graph_prefix_held(const dcp_model_state *s, uint32_t seq);
/* Cache entries (each one page on every DCP rank), and those no sequence references. */
uint32_t dcp_graph_prefix_entries(const dcp_model_state *s);
uint32_t dcp_graph_prefix_reclaimable(const dcp_model_state *s);
/* seq lets go of its entries (before its pages are freed): unreferenced ones stay cached. */
void dcp_graph_prefix_release(dcp_model_state *s, uint32_t seq);
/* Evicts up to n unreferenced device-resident entries, least recently released first (a page on
 * every rank each): to the host pool when KV offload is on (their pages copied there before this
 * returns), else out of the cache. */
dcp_status dcp_graph_prefix_evict(dcp_model_state *s, uint32_t n);
void dcp_graph_prefix_destroy(dcp_model_state *s);
/* Empty slot seq takes parent's cache entries (its leading held blocks, one more reference each;
 * every cache's block table) and parent's token ids: *blocks of them (0, nothing done, when off). */
dcp_status dcp_graph_prefix_share(dcp_model_state *s, uint32_t parent, uint32_t seq, uint32_t *blocks);

/* ---- forks of a sequence (fork.c) ---------------------------------------------------------- */

/* Leading global blocks of seq whose pages it shares with the other sequences of its fork group
 * (prefix caching off), and the distinct pages of every group on each rank (one per such block). */
uint32_t dcp_graph_fork_shared(const dcp_model_state *s, uint32_t seq);
uint32_t dcp_graph_fork_pages(const dcp_model_state *s);
/* seq ends or is shortened to `length` (refused inside its shared blocks: DCP_ERR_INVALID_ARGUMENT). */
void dcp_graph_fork_release(dcp_model_state *s, uint32_t seq);
dcp_status dcp_graph_fork_check_truncate(const dcp_model_state *s, uint32_t seq, uint32_t length);
void dcp_graph_fork_destroy(dcp_model_state *s);

/* ---- blocks for the architectures ---------------------------------------------------------- */

/* Rank i's command of the current round. */
dcp_cmd *dcp_graph_cmd(const dcp_model_state *s, uint32_t i);
/* xn rows [0, rows) of rank i = rmsnorm(x) * w, after x += the pending all-reduce's parts (in
 * rank order, read in place) when there is one. The caller clears s->ar_tokens once every rank
 * has recorded its norm (dcp_graph_norm_done). */
dcp_status dcp_graph_norm(dcp_model_state *s, uint32_t i, dcp_buffer *w);
void dcp_graph_norm_done(dcp_model_state *s);
/* The input of a column-parallel matmul (the full n_embd columns, no window) of rank i taking
 * rmsnorm(x) * w (a->w set): sets a's x, x_offset, x_stride and norm. One rank, where the fusion
 * pays for a->w on the rank's device (dcp_matmul_norm_pays: always on GPUs, small matrices on CPU
 * drivers): x itself, the norm fused into the matmul's load (a->norm = w; nothing recorded). Else
 * xn, recorded here by dcp_graph_norm (with the pending all-reduce's sum, which also writes x back)
 * and a barrier. The caller records the matmul; xn is then valid only in the second case (a matmul
 * must be xn's only reader). */
dcp_status dcp_graph_norm_matmul(dcp_model_state *s, uint32_t i, dcp_buffer *w, dcp_matmul_args *a);
/* Where a row-parallel projection of rank i writes: straight into the residual x (accumulate) with
 * one rank, else into part. */
dcp_buffer *dcp_graph_row_parallel_out(const dcp_model_state *s, uint32_t i);
bool dcp_graph_row_parallel_accumulate(const dcp_model_state *s);
/* The all-reduce of every rank's part [rows][n_embd] (TP > 1; nothing with one rank). */
dcp_status dcp_graph_all_reduce(dcp_model_state *s);
/* The dense SwiGLU feed-forward of rank i from its normed rows xn: h = silu(gate) * up
 * ([T][f_pad], padding columns kept 0) of w_gu xn ([T][2 f]: gate rows then up rows), then the
 * row-parallel w_down h into the residual or part. A one-part w_gu makes h in one dispatch (the
 * SwiGLU fused into the matmul's store, gu unused); gate and up of different types (two parts) go
 * through gu and dcp_op_swiglu (the same bits). */
dcp_status dcp_graph_dense_ffn(dcp_model_state *s, uint32_t i, const dcp_matrix *w_gu, const dcp_matrix *w_down,
                               uint32_t f, dcp_buffer *gu, dcp_buffer *h);
/* rmsnorm(x) * norm (dcp_graph_norm_matmul: at one rank fused into the gate|up matmul's load where
 * that pays), then the dense FFN as dcp_graph_dense_ffn. */
dcp_status dcp_graph_norm_ffn(dcp_model_state *s, uint32_t i, dcp_buffer *norm, const dcp_matrix *w_gu,
                              const dcp_matrix *w_down, uint32_t f, dcp_buffer *gu, dcp_buffer *h);
/* The DCP attention steps of every layer and group held here (attns [n_layer][ng]): set to the
 * step's rows, and their replay keys mixed into key. */
dcp_status dcp_graph_cp_set_rows(dcp_model_state *s, dcp_cp_attn *const *attns);
uint64_t dcp_graph_cp_key(const dcp_model_state *s, dcp_cp_attn *const *attns, uint64_t key);
/* RoPE angles of the rows (host-visible [rows][pairs][2] f32 (cos, sin)) of rank i. */
dcp_buffer *dcp_graph_rope(const dcp_model_state *s, uint32_t i);
/* Each row's block table and local length on local rank i of layer l's cache (DCP = 1):
 * lens [rows], bt [rows][max_blocks] in s's scratch. */
void dcp_graph_rows_tables(dcp_model_state *s, uint32_t l, uint32_t i);

#endif
