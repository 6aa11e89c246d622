/* Automatic prefix caching (issue 20; src/model/prefix.c, the engine's admissions):
 *  - hash chain: deterministic, changed by the parent hash, by any token and by its position;
 *    the chain's seed changes with the KV dtype;
 *  - sharing: a request whose prompt starts like an earlier one's attaches its full blocks (at
 *    most n - 1 tokens), their pages listed by both block tables with one more holder each, and
 *    prefills only the rest; partial blocks are not shared;
 *  - the real pools agree with the formula accounting after every step: free pages + distinct
 *    pages in use = the pool; free (formula) = real free + unreferenced cached blocks;
 *  - LRU eviction: a pool too small for every prompt evicts the least recently released blocks
 *    first; a request whose blocks were evicted misses, one whose blocks stayed hits;
 *  - preemption: a preempted request's blocks stay cached and its recomputation hits them;
 *  - cancellation frees only the pages no other sequence (or the cache) holds;
 *  - the DCP block rule: on one trace, the hit tokens at DCP N (TP 8) equal those at DCP 1 (TP 1)
 *    rounded down to blocks of N pages, for N = 2, 4, 8 and interleave 1 and 16 (a generated llama
 *    with one KV head, so that DCP 8 fits TP 8);
 *  - with n-gram speculation: rejected drafts are never cached, the tokens the same;
 *  - exact: every request's tokens (greedy and seeded sampling) are bitwise those of the same
 *    request alone without caching, with its prefix from the cache and batched with others, over
 *    stories260K (GQA, f16 KV) at TP 1 and the DCP layouts, a generated llama with q8_0 KV, and
 *    deepseek2 (MLA latent cache) with f16 and q8_0 latent rows, at TP 1 and a DCP layout;
 *  - KV offload: blocks evicted from a pool too small for every prompt go to a host pool and come
 *    back on a hit (counted in blocks and bytes), the host pool evicts its oldest blocks when full,
 *    and the tokens are bitwise those computed, alone and batched, over GQA f16 and q8_0 and the
 *    MLA latent cache, at TP 1 and DCP layouts;
 *  - MPI followers (a second run state applying the engine's step plans): the same slots, block
 *    tables, cache and host pool counts at every plan, the same KV bytes, with and without KV
 *    offload (blocks restored from host, the host pool evicting), the tokens unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/engine.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/tokenizer.h"
#include "kv/kv_internal.h"
#include "model/graph.h"
#include "testmodel/testmodel.h"
#include "ref_model.h"
#include "vkutil.h"

enum { MAXR = 8, MAXP = 512 };

typedef enum src_kind { SRC_STORIES, SRC_GEN_KV1, SRC_GEN_HD32, SRC_DS2, SRC_DS2_Q8 } src_kind;

typedef dcp_test_engine fixture;

static void open_src(src_kind k, fixture *f)
{
    if (k == SRC_STORIES) {
        DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &f->g));
        return;
    }
    if (k == SRC_DS2 || k == SRC_DS2_Q8) {
        f->g = dcp_test_open_deepseek2(k == SRC_DS2_Q8, &f->bytes);
        return;
    }
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.n_layer = 2;
    mc.n_head = 8;
    mc.n_ff = 256;
    if (k == SRC_GEN_KV1) { /* one KV head: DCP up to 8 at TP 8 */
        mc.n_embd = 128;
        mc.n_head_kv = 1;
        mc.head_dim = 16;
        mc.seed = 77;
    } else {
        mc.n_embd = 256;
        mc.n_head_kv = 2;
        mc.head_dim = 32;
        mc.seed = 311;
    }
    dcp_gguf_writer *w;
    DCP_ASSERT_OK(dcp_gguf_build_test_model(&mc, &w));
    f->g = dcp_test_gguf_of_writer(w, &f->bytes, "<generated test model>");
}

static void fx_open_spec(fixture *f, src_kind src, uint32_t tp, uint32_t dcp, const dcp_model_state_config *sc,
                         bool cache, uint32_t ngram_k)
{
    memset(f, 0, sizeof *f);
    open_src(src, f);
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    ec.enable_prefix_caching = cache;
    if (ngram_k) {
        ec.spec.method = DCP_SPEC_NGRAM;
        ec.spec.num_speculative_tokens = ngram_k;
        ec.spec.prompt_lookup_max = 3;
        ec.spec.prompt_lookup_min = 1;
    }
    dcp_test_engine_open(f, tp, dcp, sc, &ec);
}

static void fx_open(fixture *f, src_kind src, uint32_t tp, uint32_t dcp, const dcp_model_state_config *sc, bool cache)
{
    fx_open_spec(f, src, tp, dcp, sc, cache, 0);
}

static void fx_close(fixture *f)
{
    dcp_engine_destroy(f->e);
    f->e = NULL;
    /* The engine took its cached blocks with it: the pools are empty again. */
    for (uint32_t k = 0; k < f->s->ng * f->cfg.n_layer; k++)
        for (uint32_t i = 0; i < f->s->gn; i++)
            assert_int_equal(dcp_kv_cache_pages_free(f->s->caches[k], i), f->s->cfg.kv_pages);
    dcp_test_engine_close(f);
}

/* ---- requests ---------------------------------------------------------------------------------- */

typedef struct req {
    int32_t prompt[MAXP];
    uint32_t n, max_tokens;
    float temp;
    uint64_t seed;
} req;

typedef dcp_test_out out;

static void submit(fixture *f, const req *r, out *o)
{
    dcp_engine_request q = DCP_ENGINE_REQUEST_DEFAULT;
    q.prompt = r->prompt;
    q.n_prompt = r->n;
    q.max_tokens = r->max_tokens;
    q.ignore_eos = true;
    q.sampling.temperature = r->temp;
    q.sampling.seed = r->seed;
    q.user = o;
    memset(o, 0, sizeof *o);
    DCP_ASSERT_OK(dcp_engine_submit(f->e, &q, &o->id));
}

/* ---- the real pools against the accounting ---------------------------------------------------- */

/* Every cache and rank: the pages listed by block tables or held by the cache are distinct from
 * the free ones and add up to the pool; the formula's free pages are the real free ones plus the
 * unreferenced cached blocks. */
static void check_pools(const fixture *f)
{
    const dcp_model_state *s = f->s;
    const uint32_t P = s->cfg.kv_pages;
    uint8_t *seen = malloc(P);
    dcp_prefix_cache_stats ps;
    dcp_model_state_prefix_stats(s, &ps);
    for (uint32_t k = 0; k < s->ng * f->cfg.n_layer; k++)
        for (uint32_t i = 0; i < s->gn; i++) {
            const dcp_kv_cache *c = s->caches[k];
            uint32_t used = 0;
            for (uint32_t p = 0; p < P; p++) used += dcp_kv_cache_page_refs(c, i, p) > 0;
            const uint32_t real_free = dcp_kv_cache_pages_free(c, i);
            assert_int_equal(used + real_free, P);
            /* Every listed page is held. */
            memset(seen, 0, P);
            for (uint32_t q = 0; q < s->cfg.max_seqs; q++) {
                const uint32_t *bt = dcp_kv_cache_block_table(c, i, q);
                const uint32_t len = dcp_kv_cache_seq_local_length(c, i, q);
                for (uint32_t b = 0; b < (len + s->cfg.block_size - 1) / s->cfg.block_size; b++)
                    assert_true(dcp_kv_cache_page_refs(c, i, bt[b]) > 0);
            }
            const uint32_t gr = s->m->dcp > 1 ? s->r[k % s->ng * s->gn + i].gr : 0;
            assert_int_equal(dcp_model_state_rank_pages_free(s, gr), real_free + ps.blocks_unreferenced);
        }
    free(seen);
}

/* Runs until idle, checking the pools after every step. */
static void run(fixture *f)
{
    for (uint32_t step = 0; dcp_engine_busy(f->e); step++) {
        DCP_ASSERT_OK(dcp_engine_step(f->e));
        dcp_test_drain(f->e);
        check_pools(f);
        assert_true(step < 4000);
    }
}

static void make_prompt(req *r, uint32_t n, uint32_t salt, uint32_t V)
{
    r->n = n;
    for (uint32_t t = 0; t < n; t++) r->prompt[t] = (int32_t)(1 + (t * 37u + salt * 101u + (t * t) % 13u) % (V - 1));
}

/* r = the first `keep` tokens of base, then `extra` tokens of another stream (differing at once). */
static void fork_prompt(req *r, const req *base, uint32_t keep, uint32_t extra, uint32_t salt, uint32_t V)
{
    memcpy(r->prompt, base->prompt, keep * sizeof *r->prompt);
    for (uint32_t t = 0; t < extra; t++) {
        int32_t v = (int32_t)(1 + ((keep + t) * 53u + salt * 7u) % (V - 1));
        if (t == 0 && keep < base->n && v == base->prompt[keep]) v = v % (int32_t)(V - 1) + 1;
        r->prompt[keep + t] = v;
    }
    r->n = keep + extra;
}

static void assert_same(const char *what, uint32_t k, const out *a, const out *b)
{
    if (a->n != b->n || memcmp(a->toks, b->toks, a->n * sizeof a->toks[0]))
        fail_msg("%s: request %u: %u tokens from the cache (first %d) differ from %u computed (first %d)", what, k,
                 a->n, a->n ? a->toks[0] : -1, b->n, b->n ? b->toks[0] : -1);
}

/* ---- the hash chain ----------------------------------------------------------------------------- */

static void test_hash_chain(void **state)
{
    (void)state;
    int32_t a[16], b[16];
    for (int i = 0; i < 16; i++) a[i] = b[i] = 100 + i;
    const uint64_t h0 = dcp_prefix_block_hash(42, a, 16);
    assert_true(h0 == dcp_prefix_block_hash(42, b, 16));
    assert_true(h0 != dcp_prefix_block_hash(43, a, 16));
    b[15] = 99;
    assert_true(h0 != dcp_prefix_block_hash(42, b, 16));
    b[15] = a[15];
    b[3] = a[4];
    b[4] = a[3]; /* the same tokens in another order */
    assert_true(h0 != dcp_prefix_block_hash(42, b, 16));
    assert_true(dcp_prefix_block_hash(h0, a, 16) != h0);
    assert_true(dcp_prefix_block_hash(42, a, 15) != h0);
}

/* ---- sharing, reference counts, cancellation (stories260K, TP 1, pages of 4) ----------------- */

static void test_sharing_cancel(void **state)
{
    (void)state;
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 128;
    sc.max_seqs = 4;
    sc.max_rows = 16;
    sc.block_size = 4;
    fixture f;
    fx_open(&f, SRC_STORIES, 1, 1, &sc, true);
    const uint32_t V = f.cfg.n_vocab;
    static req a, b, c;
    make_prompt(&a, 40, 1, V);
    a.max_tokens = 6;
    b = a; /* the same prompt: 36 tokens cached (never the last) */
    b.temp = 0.8f;
    b.seed = 5;
    fork_prompt(&c, &a, 21, 9, 2, V); /* 21 shared: 5 blocks of 4, the partial sixth not shared */
    c.max_tokens = 6;
    out oa, ob, oc;
    submit(&f, &a, &oa);
    run(&f);
    assert_int_equal(oa.cached, 0);
    dcp_prefix_cache_stats ps;
    dcp_model_state_prefix_stats(f.s, &ps);
    assert_true(ps.enabled);
    assert_int_equal(ps.block_tokens, 4);
    assert_int_equal(ps.blocks, (40 + 6 - 1) / 4); /* every full block of what a had in KV */
    assert_int_equal(ps.blocks_unreferenced, ps.blocks);
    /* b and c together: b shares c's first 5 blocks, and 4 more. */
    submit(&f, &b, &ob);
    submit(&f, &c, &oc);
    DCP_ASSERT_OK(dcp_engine_step(f.e));
    dcp_test_drain(f.e);
    check_pools(&f);
    const int32_t sb = dcp_engine_request_slot(f.e, ob.id), scs = dcp_engine_request_slot(f.e, oc.id);
    assert_true(sb >= 0 && scs >= 0);
    const dcp_kv_cache *k0 = f.s->caches[0];
    const uint32_t *btb = dcp_kv_cache_block_table(k0, 0, (uint32_t)sb), *btc = dcp_kv_cache_block_table(k0, 0, (uint32_t)scs);
    for (uint32_t blk = 0; blk < 5; blk++) {
        assert_int_equal(btb[blk], btc[blk]);
        assert_int_equal(dcp_kv_cache_page_refs(k0, 0, btb[blk]), 3); /* the cache, b, c */
    }
    for (uint32_t blk = 5; blk < 9; blk++) assert_int_equal(dcp_kv_cache_page_refs(k0, 0, btb[blk]), 2);
    /* c's sixth and seventh blocks (tokens 20..27, full after its first chunk) are its own, cached
     * now; its eighth (28, 29) is partial: its own, never cached. */
    assert_true(btc[5] != btb[5]);
    assert_int_equal(dcp_kv_cache_page_refs(k0, 0, btc[5]), 2);
    assert_int_equal(dcp_kv_cache_page_refs(k0, 0, btc[6]), 2);
    assert_int_equal(dcp_kv_cache_page_refs(k0, 0, btc[7]), 1);
    /* Cancelling c frees only what no one else holds (its partial block); its cached blocks become
     * reclaimable; the shared ones lose one holder. */
    const uint32_t free0 = dcp_kv_cache_pages_free(k0, 0), avail0 = dcp_model_state_rank_pages_free(f.s, 0);
    const uint32_t own = dcp_model_state_seq_pages(f.s, (uint32_t)scs, 0) - 5;
    assert_int_equal(own, 3);
    DCP_ASSERT_OK(dcp_engine_cancel(f.e, oc.id));
    dcp_test_drain(f.e);
    assert_int_equal(dcp_kv_cache_pages_free(k0, 0), free0 + 1);
    assert_int_equal(dcp_model_state_rank_pages_free(f.s, 0), avail0 + own);
    for (uint32_t blk = 0; blk < 5; blk++) assert_int_equal(dcp_kv_cache_page_refs(k0, 0, btb[blk]), 2);
    check_pools(&f);
    run(&f);
    assert_int_equal(ob.cached, 36);
    dcp_engine_stats es;
    dcp_engine_get_stats(f.e, &es);
    assert_int_equal(es.prefix_hits, 36 + 20);
    assert_int_equal(es.prefix_queries, 40 + 40 + 30);
    /* b's tokens are those of b alone without caching; a's greedy tokens again from the cache. */
    out ob2, oa2;
    submit(&f, &a, &oa2);
    run(&f);
    assert_int_equal(oa2.cached, 36);
    assert_same("same prompt again", 0, &oa2, &oa);
    fixture g;
    fx_open(&g, SRC_STORIES, 1, 1, &sc, false);
    submit(&g, &b, &ob2);
    run(&g);
    assert_int_equal(ob2.cached, 0);
    assert_same("sampled, prefix from the cache", 1, &ob, &ob2);
    fx_close(&g);
    fx_close(&f);
}

/* ---- LRU eviction and preemption (stories260K, TP 1) ------------------------------------------- */

static void test_lru(void **state)
{
    (void)state;
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 128;
    sc.max_seqs = 2;
    sc.max_rows = 16;
    sc.block_size = 4;
    sc.kv_pages = 16; /* two prompts of 40 tokens do not both stay cached */
    fixture f;
    fx_open(&f, SRC_STORIES, 1, 1, &sc, true);
    const uint32_t V = f.cfg.n_vocab;
    static req a, b;
    make_prompt(&a, 40, 3, V);
    make_prompt(&b, 40, 4, V);
    a.max_tokens = b.max_tokens = 2;
    out o[6];
    submit(&f, &a, &o[0]);
    run(&f);
    submit(&f, &b, &o[1]); /* takes 11 pages: 6 free + a's 10 reclaimable: evicts a's tail */
    run(&f);
    dcp_prefix_cache_stats ps;
    dcp_model_state_prefix_stats(f.s, &ps);
    assert_int_equal(ps.evictions, 5);
    assert_int_equal(ps.blocks, 15);
    submit(&f, &b, &o[2]); /* b was released last: all of it hits */
    run(&f);
    assert_int_equal(o[2].cached, 36);
    assert_same("b again", 1, &o[2], &o[1]);
    /* a's blocks were evicted tail first: what is left of its chain is its head. */
    submit(&f, &a, &o[3]);
    run(&f);
    assert_int_equal(o[3].cached, 16); /* blocks 0..3: block 4 went for b's second run */
    assert_same("a again", 0, &o[3], &o[0]);
    fx_close(&f);
}

static void test_preemption(void **state)
{
    (void)state;
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 128;
    sc.max_seqs = 3;
    sc.max_rows = 16;
    sc.block_size = 4;
    sc.kv_pages = 30; /* three requests of 24 + 40 tokens cannot all decode together */
    const uint32_t n = 3;
    static req r[3];
    out with[3], without[3];
    fixture f;
    fx_open(&f, SRC_STORIES, 1, 1, &sc, true);
    const uint32_t V = f.cfg.n_vocab;
    for (uint32_t k = 0; k < n; k++) {
        make_prompt(&r[k], 24, 10 + k, V);
        r[k].max_tokens = 40;
        r[k].temp = k == 1 ? 0.9f : 0.0f;
        r[k].seed = 17 + k;
    }
    for (uint32_t k = 0; k < n; k++) submit(&f, &r[k], &with[k]);
    run(&f);
    dcp_engine_stats es;
    dcp_engine_get_stats(f.e, &es);
    assert_true(es.preemptions > 0);
    assert_true(es.prefix_hits > 0); /* the recomputations took their blocks from the cache */
    fprintf(stderr, "preemption: %llu preemptions, %llu of %llu queried tokens hit, %llu recomputed rows\n",
            (unsigned long long)es.preemptions, (unsigned long long)es.prefix_hits,
            (unsigned long long)es.prefix_queries, (unsigned long long)es.recomputed_tokens);
    fx_close(&f);
    fixture g;
    sc.kv_pages = 0;
    fx_open(&g, SRC_STORIES, 1, 1, &sc, false);
    for (uint32_t k = 0; k < n; k++) {
        submit(&g, &r[k], &without[k]);
        run(&g);
        assert_same("preempted, recomputed from the cache", k, &with[k], &without[k]);
    }
    fx_close(&g);
}

/* ---- the DCP block rule and bitwise tokens over one trace ----------------------------------- */

enum { NTRACE = 5 };

/* The run state of the traces: four slots, 64 rows a step, room for prompts of plen and their
 * tokens. */
static dcp_model_state_config trace_config(uint32_t plen, uint32_t block, uint32_t interleave, dcp_dtype kv)
{
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = plen + 32;
    sc.max_seqs = 4;
    sc.max_rows = 64;
    sc.block_size = block;
    sc.interleave = interleave;
    sc.kv_dtype = kv;
    return sc;
}

/* The trace: r0 alone (max 1 token: what it caches is its prompt), then r1..r4 together: forks of
 * r0's prompt at 250, 40, 200 tokens and r0's prompt itself. Each request's cached tokens into
 * cached[] (with caching), its tokens bitwise against the same request alone without caching. */
static void run_trace(src_kind src, uint32_t tp, uint32_t dcp, uint32_t interleave, uint32_t block, dcp_dtype kv,
                      uint32_t plen, uint32_t *cached)
{
    dcp_model_state_config sc = trace_config(plen, block, interleave, kv);
    fixture f;
    fx_open(&f, src, tp, dcp, &sc, true);
    const uint32_t V = f.cfg.n_vocab;
    static req r[NTRACE];
    make_prompt(&r[0], plen, 1, V);
    r[0].max_tokens = 1;
    fork_prompt(&r[1], &r[0], plen * 5 / 6, plen / 6, 2, V);
    fork_prompt(&r[2], &r[0], plen / 7, plen / 3, 3, V);
    fork_prompt(&r[3], &r[0], plen * 2 / 3, 20, 4, V);
    r[4] = r[0];
    for (uint32_t k = 1; k < NTRACE; k++) {
        r[k].max_tokens = 6;
        r[k].temp = k % 2 ? 0.0f : 0.7f;
        r[k].seed = 100 + k;
    }
    out with[NTRACE], without[NTRACE];
    submit(&f, &r[0], &with[0]);
    run(&f);
    for (uint32_t k = 1; k < NTRACE; k++) submit(&f, &r[k], &with[k]);
    run(&f);
    dcp_engine_stats es;
    dcp_engine_get_stats(f.e, &es);
    uint64_t hits = 0;
    for (uint32_t k = 0; k < NTRACE; k++) {
        cached[k] = with[k].cached;
        hits += cached[k];
    }
    assert_int_equal(es.prefix_hits, hits);
    fprintf(stderr, "%s TP %u DCP %u interleave %u block %u %s: cached tokens", src == SRC_STORIES ? "stories260K"
            : src == SRC_GEN_KV1 ? "llama-1kv" : src == SRC_GEN_HD32 ? "llama-hd32" : src == SRC_DS2 ? "deepseek2" : "deepseek2-kv64", tp, dcp, interleave,
            block, dcp_dtype_name(kv));
    for (uint32_t k = 0; k < NTRACE; k++) fprintf(stderr, " %u/%u", cached[k], r[k].n);
    fprintf(stderr, "; %llu prefill rows saved of %llu\n", (unsigned long long)es.prefix_hits,
            (unsigned long long)es.prefix_queries);
    fx_close(&f);
    fixture g;
    fx_open(&g, src, tp, dcp, &sc, false);
    for (uint32_t k = 0; k < NTRACE; k++) {
        submit(&g, &r[k], &without[k]);
        run(&g);
        assert_int_equal(without[k].cached, 0);
        char what[128];
        snprintf(what, sizeof what, "TP %u DCP %u interleave %u %s", tp, dcp, interleave, dcp_dtype_name(kv));
        assert_same(what, k, &with[k], &without[k]);
    }
    fx_close(&g);
}

/* The trace at DCP 1 (TP 1), then at DCP N (TP 8) with interleave 1 and 16. */
static void check_dcp_rule(uint32_t N)
{
    const uint32_t B = 16, plen = 300;
    uint32_t base[NTRACE];
    run_trace(SRC_GEN_KV1, 1, 1, 1, B, DCP_DTYPE_F16, plen, base);
    assert_int_equal(base[0], 0);
    assert_int_equal(base[4], (plen - 1) / B * B);
    const uint32_t Is[] = {1, 16};
    for (uint32_t b = 0; b < 2; b++) {
        uint32_t got[NTRACE];
        run_trace(SRC_GEN_KV1, 8, N, Is[b], B, DCP_DTYPE_F16, plen, got);
        for (uint32_t k = 0; k < NTRACE; k++) {
            const uint32_t want = base[k] / (B * N) * (B * N);
            if (got[k] != want)
                fail_msg("DCP %u interleave %u: request %u hit %u tokens; DCP 1 hit %u, rounded down to blocks of "
                         "%u tokens: %u", N, Is[b], k, got[k], base[k], B * N, want);
        }
    }
}

static void test_dcp_rule_2(void **state)
{
    (void)state;
    check_dcp_rule(2);
}

static void test_dcp_rule_4(void **state)
{
    (void)state;
    check_dcp_rule(4);
}

static void test_dcp_rule_8(void **state)
{
    (void)state;
    check_dcp_rule(8);
}

/* ---- other caches: q8_0 KV, the MLA latent cache ----------------------------------------------- */

static void test_models(void **state)
{
    (void)state;
    uint32_t c[NTRACE];
    run_trace(SRC_STORIES, 1, 1, 1, 16, DCP_DTYPE_F16, 200, c); /* GQA: 4 KV heads */
    assert_int_equal(c[4], 192);
    run_trace(SRC_STORIES, 8, 2, 1, 16, DCP_DTYPE_F16, 200, c);
    assert_int_equal(c[4], 192);
    run_trace(SRC_GEN_HD32, 1, 1, 1, 8, DCP_DTYPE_Q8_0, 120, c);
    assert_int_equal(c[4], 112);
    run_trace(SRC_GEN_HD32, 8, 2, 4, 8, DCP_DTYPE_Q8_0, 120, c);
    assert_int_equal(c[4], 112);
    run_trace(SRC_DS2, 1, 1, 1, 8, DCP_DTYPE_F16, 120, c);
    assert_int_equal(c[4], 112);
    run_trace(SRC_DS2, 4, 4, 1, 8, DCP_DTYPE_F16, 120, c);
    assert_int_equal(c[4], 96);
    run_trace(SRC_DS2_Q8, 4, 4, 2, 8, DCP_DTYPE_Q8_0, 120, c);
    assert_int_equal(c[4], 96);
}

/* ---- forks of n choices (dcp_model_state_fork_seq) over every kind of cache ------------------- */

/* A request with n = 3 choices (seeded sampling) on an engine with prefix caching on, then off:
 * choices 1 and 2 are forks of choice 0 (no prompt row run again: the step rows are the prompt once
 * and the decode rows), the pools agree with the accounting after every step (check_pools: the
 * fork group's shared pages counted once), and every choice's tokens are bitwise those of a
 * request with n = 1 and the choice's seed run alone without caching, which fails if any layer's
 * copied last page (K and V, the latent rows, q8_0 scales) differed from what it computed. */
static void fork_trace(src_kind src, uint32_t tp, uint32_t dcp, uint32_t interleave, uint32_t block, dcp_dtype kv,
                       uint32_t plen)
{
    dcp_model_state_config sc = trace_config(plen, block, interleave, kv);
    assert_true(plen % (block * dcp) != 0); /* a partial last block to copy */
    enum { N = 3, GEN = 6 };
    fixture f;
    fx_open(&f, src, tp, dcp, &sc, false);
    static req r;
    make_prompt(&r, plen, 9, f.cfg.n_vocab);
    r.max_tokens = GEN;
    r.temp = 0.7f;
    out ref[N];
    for (uint32_t i = 0; i < N; i++) {
        r.seed = dcp_engine_choice_seed(4242, i);
        submit(&f, &r, &ref[i]);
        run(&f);
    }
    fx_close(&f);
    for (int cache = 1; cache >= 0; cache--) {
        fx_open(&f, src, tp, dcp, &sc, cache);
        dcp_engine_request q = DCP_ENGINE_REQUEST_DEFAULT;
        q.prompt = r.prompt;
        q.n_prompt = r.n;
        q.max_tokens = GEN;
        q.ignore_eos = true;
        q.n = N;
        q.sampling.temperature = r.temp;
        q.sampling.seed = 4242;
        out got[N];
        memset(got, 0, sizeof got);
        q.user = got;
        uint64_t id;
        DCP_ASSERT_OK(dcp_engine_submit(f.e, &q, &id));
        run(&f);
        dcp_engine_stats es;
        dcp_engine_get_stats(f.e, &es);
        fprintf(stderr, "fork: %s TP %u DCP %u interleave %u block %u %s cache %s: %llu forked, %llu rows\n",
                src == SRC_GEN_HD32 ? "llama-hd32" : src == SRC_DS2 ? "deepseek2" : src == SRC_DS2_Q8 ? "deepseek2-kv64"
                                                                                                    : "stories260K",
                tp, dcp, interleave, block, dcp_dtype_name(kv), cache ? "on" : "off",
                (unsigned long long)es.forked_choices, (unsigned long long)es.rows);
        assert_int_equal(es.forked_choices, N - 1);
        assert_int_equal(es.rows, plen + N * (GEN - 1));
        for (uint32_t i = 0; i < N; i++) {
            assert_true(got[i].done);
            char what[128];
            snprintf(what, sizeof what, "fork TP %u DCP %u %s cache %d", tp, dcp, dcp_dtype_name(kv), cache);
            assert_same(what, i, &got[i], &ref[i]);
        }
        fx_close(&f);
    }
}

static void test_forks(void **state)
{
    (void)state;
    fork_trace(SRC_STORIES, 8, 2, 1, 16, DCP_DTYPE_F16, 61);
    fork_trace(SRC_GEN_HD32, 1, 1, 1, 8, DCP_DTYPE_Q8_0, 61);
    fork_trace(SRC_GEN_HD32, 8, 2, 4, 8, DCP_DTYPE_Q8_0, 61);
    fork_trace(SRC_DS2, 4, 4, 1, 8, DCP_DTYPE_F16, 61);
    fork_trace(SRC_DS2_Q8, 4, 4, 2, 8, DCP_DTYPE_Q8_0, 61);
}

/* With n-gram speculation: the drafts rolled back are never cached (only the tokens before a
 * step's drafts are committed), and the tokens from the cache are those without it. */
static void test_speculation(void **state)
{
    (void)state;
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 160;
    sc.max_seqs = 2;
    sc.max_rows = 16;
    sc.max_logits = 16;
    sc.block_size = 4;
    static req a, b;
    fixture f, g;
    fx_open_spec(&f, SRC_STORIES, 1, 1, &sc, true, 3);
    const uint32_t V = f.cfg.n_vocab;
    make_prompt(&a, 30, 7, V);
    for (uint32_t t = 15; t < 30; t++) a.prompt[t] = a.prompt[t - 15]; /* self-quoting: drafts found */
    a.max_tokens = 48;
    fork_prompt(&b, &a, 20, 6, 9, V);
    b.max_tokens = 40;
    out oa1, oa2, ob, ra, rb;
    submit(&f, &a, &oa1);
    run(&f);
    submit(&f, &a, &oa2);
    submit(&f, &b, &ob);
    run(&f);
    dcp_engine_stats es;
    dcp_engine_get_stats(f.e, &es);
    assert_true(es.spec_draft_tokens > 0);
    assert_int_equal(oa2.cached, 28);
    assert_int_equal(ob.cached, 20);
    fx_close(&f);
    fx_open(&g, SRC_STORIES, 1, 1, &sc, false);
    submit(&g, &a, &ra);
    run(&g);
    submit(&g, &b, &rb);
    run(&g);
    assert_same("speculation, first", 0, &oa1, &ra);
    assert_same("speculation, from the cache", 0, &oa2, &ra);
    assert_same("speculation, fork", 1, &ob, &rb);
    fx_close(&g);
}

static dcp_status no_plan(void *user, const dcp_engine_plan *plan)
{
    (void)user;
    (void)plan;
    return DCP_OK;
}

/* Bytes of one cached block on this process: its page in every layer's cache on every local rank
 * (every rank of the TP group here: one process holds them all). */
static uint64_t block_bytes(const fixture *f)
{
    uint64_t b = 0;
    for (uint32_t k = 0; k < f->s->ng * f->cfg.n_layer; k++)
        for (uint32_t i = 0; i < f->s->gn; i++) b += dcp_kv_pool_page_bytes(dcp_kv_cache_pool(f->s->caches[k], i));
    return b;
}

static void print_offload(const char *what, const fixture *f)
{
    dcp_engine_stats es;
    dcp_engine_get_stats(f->e, &es);
    dcp_prefix_cache_stats ps;
    dcp_model_state_prefix_stats(f->s, &ps);
    fprintf(stderr, "%s: offloaded %llu blocks (%llu bytes), restored %llu blocks (%llu bytes: %llu prefill rows "
            "saved), host evictions %llu, host-resident %u of %u; prefix hits %llu of %llu tokens\n", what,
            (unsigned long long)es.offload_to_host_blocks, (unsigned long long)es.offload_to_host_bytes,
            (unsigned long long)es.offload_to_device_blocks, (unsigned long long)es.offload_to_device_bytes,
            (unsigned long long)(es.offload_to_device_blocks * ps.block_tokens),
            (unsigned long long)es.offload_host_evictions, es.offload_host_blocks, es.offload_host_capacity,
            (unsigned long long)es.prefix_hits, (unsigned long long)es.prefix_queries);
}

/* ---- MPI followers: the step plans replayed on another run state --------------------------- */

/* A follower in this process: a second run state of the same model that applies every plan the
 * engine hands out (dcp_engine_plan_apply), as dcp-vk-run / dcp-vk-serve's other processes do. */
typedef struct follower {
    const fixture *f; /* the leader */
    dcp_model_state *s;
    uint32_t ops[6]; /* plans' ops by kind */
    uint32_t plans;
} follower;

static void check_follower(const fixture *f, const follower *w, const char *what);

/* The plan's ops, then (the follower now where the leader is before its step) the check, then the
 * rows. */
static dcp_status follow_plan(void *user, const dcp_engine_plan *plan)
{
    follower *w = user;
    for (uint32_t i = 0; i < plan->n_ops; i++) w->ops[plan->ops[i].kind < 6 ? plan->ops[i].kind : 0]++;
    w->plans++;
    dcp_engine_plan ops = *plan, rows = *plan;
    ops.n_rows = 0;
    rows.n_ops = 0;
    dcp_status st = dcp_engine_plan_apply(w->s, NULL, &ops);
    if (st != DCP_OK) return st;
    char what[32];
    snprintf(what, sizeof what, "plan %u", w->plans);
    check_follower(w->f, w, what);
    return dcp_engine_plan_apply(w->s, NULL, &rows);
}

/* The follower's state is the leader's: sequence lengths, block tables and the cache's counts. */
static void check_follower(const fixture *f, const follower *w, const char *what)
{
    dcp_prefix_cache_stats a, b;
    dcp_model_state_prefix_stats(f->s, &a);
    dcp_model_state_prefix_stats(w->s, &b);
    assert_true(b.enabled);
    if (a.blocks != b.blocks || a.blocks_unreferenced != b.blocks_unreferenced || a.evictions != b.evictions)
        fail_msg("%s: the follower's cache has %u blocks (%u unreferenced, %llu evictions), the leader's %u (%u, "
                 "%llu)", what, b.blocks, b.blocks_unreferenced, (unsigned long long)b.evictions, a.blocks,
                 a.blocks_unreferenced, (unsigned long long)a.evictions);
    /* KV offload: the same host pool, the same blocks sent there, evicted from there and restored */
    if (a.host_capacity != b.host_capacity || a.host_blocks != b.host_blocks || a.host_evictions != b.host_evictions ||
        a.offloaded_blocks != b.offloaded_blocks || a.offloaded_bytes != b.offloaded_bytes ||
        a.restored_blocks != b.restored_blocks || a.restored_bytes != b.restored_bytes)
        fail_msg("%s: the follower's host pool: %u of %u blocks, %llu host evictions, %llu offloaded (%llu bytes), "
                 "%llu restored (%llu bytes); the leader's: %u of %u, %llu, %llu (%llu), %llu (%llu)", what,
                 b.host_blocks, b.host_capacity, (unsigned long long)b.host_evictions,
                 (unsigned long long)b.offloaded_blocks, (unsigned long long)b.offloaded_bytes,
                 (unsigned long long)b.restored_blocks, (unsigned long long)b.restored_bytes, a.host_blocks,
                 a.host_capacity, (unsigned long long)a.host_evictions, (unsigned long long)a.offloaded_blocks,
                 (unsigned long long)a.offloaded_bytes, (unsigned long long)a.restored_blocks,
                 (unsigned long long)a.restored_bytes);
    const uint32_t Q = f->s->cfg.max_seqs;
    for (uint32_t q = 0; q < Q; q++)
        assert_int_equal(dcp_model_state_seq_length(w->s, q), dcp_model_state_seq_length(f->s, q));
    for (uint32_t k = 0; k < f->s->ng * f->cfg.n_layer; k++)
        for (uint32_t i = 0; i < f->s->gn; i++) {
            const dcp_kv_cache *c = f->s->caches[k], *d = w->s->caches[k];
            for (uint32_t q = 0; q < Q; q++) {
                const uint32_t n = dcp_model_state_seq_pages(f->s, q, k / f->cfg.n_layer * f->s->gn + i);
                const uint32_t *x = dcp_kv_cache_block_table(c, i, q), *y = dcp_kv_cache_block_table(d, i, q);
                for (uint32_t p = 0; p < n; p++)
                    if (x[p] != y[p])
                        fail_msg("%s: cache %u rank %u slot %u block %u: page %u on the follower, %u on the leader",
                                 what, k, i, q, p, y[p], x[p]);
            }
        }
}

/* After the same steps: every byte of every KV pool is the leader's. */
static void check_follower_kv(const fixture *f, const follower *w, const char *what)
{
    for (uint32_t k = 0; k < f->s->ng * f->cfg.n_layer; k++)
        for (uint32_t i = 0; i < f->s->gn; i++) {
            const dcp_kv_cache *c = f->s->caches[k], *d = w->s->caches[k];
            const dcp_kv_pool *pa = dcp_kv_cache_pool(c, i), *pb = dcp_kv_cache_pool(d, i);
            for (uint32_t g = 0; g < dcp_kv_pool_segment_count(pa); g++) {
                dcp_buffer *ba = dcp_kv_pool_segment(pa, g), *bb = dcp_kv_pool_segment(pb, g);
                const uint64_t n = dcp_buffer_size(ba);
                assert_int_equal(dcp_buffer_size(bb), n);
                uint8_t *ha = malloc(n), *hb = malloc(n);
                DCP_ASSERT_OK(dcp_buffer_download(ba, 0, ha, n));
                DCP_ASSERT_OK(dcp_buffer_download(bb, 0, hb, n));
                if (memcmp(ha, hb, n)) fail_msg("%s: cache %u rank %u: the follower's KV pages differ", what, k, i);
                free(ha);
                free(hb);
            }
        }
}

static void run_followed(fixture *f, const follower *w, const char *what)
{
    run(f);
    check_follower_kv(f, w, what);
}

enum { FOLLOW_OUTS = 11 }; /* a trace's requests: 8, then 3 choices */

/* A trace with eviction, sharing, speculation's roll-backs and a cancellation, its plans applied to
 * a follower state: at every plan the follower's slots and cache are the leader's, and after
 * every phase its KV pools are, byte for byte; the tokens are those computed without the cache.
 * With host_blocks, KV offload on both (a host pool of that many blocks, the leader's and the
 * follower's alike): blocks evicted from the device pages go to host memory and come back (the
 * follower's host pool and counts the leader's at every plan). res [FOLLOW_OUTS]: the tokens. */
static void follower_trace(uint32_t tp, uint32_t dcp, uint32_t host_blocks, out *res)
{
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 160;
    sc.max_seqs = 2;
    sc.max_rows = 16;
    sc.max_logits = 16;
    sc.block_size = 4;
    sc.kv_pages = 40 / dcp + 4; /* two prompts of 60 tokens do not both stay cached */
    fixture f;
    if (host_blocks) { /* the group's bytes of one block (every rank is in this process) */
        fx_open(&f, SRC_STORIES, tp, dcp, &sc, false);
        const uint64_t bb = block_bytes(&f);
        fx_close(&f);
        sc.kv_offload_bytes = host_blocks * bb + bb / 2;
    }
    fx_open(&f, SRC_STORIES, tp, dcp, &sc, true);
    dcp_engine_destroy(f.e);
    follower w = {.f = &f};
    DCP_ASSERT_OK(dcp_model_state_create(f.m, &sc, &w.s));
    DCP_ASSERT_OK(dcp_model_state_set_prefix_caching(w.s, true));
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    ec.enable_prefix_caching = true;
    ec.on_plan = follow_plan;
    ec.plan_user = &w;
    ec.spec.method = DCP_SPEC_NGRAM;
    ec.spec.num_speculative_tokens = 3;
    ec.spec.prompt_lookup_max = 3;
    ec.spec.prompt_lookup_min = 1;
    DCP_ASSERT_OK(dcp_engine_create(f.s, f.tok, &ec, &f.e));
    const uint32_t V = f.cfg.n_vocab;
    static req a, b, c, d, g;
    make_prompt(&a, 60, 21, V);
    for (uint32_t t = 20; t < 60; t++) a.prompt[t] = a.prompt[t - 20]; /* self-quoting: drafts found */
    make_prompt(&b, 60, 22, V);
    fork_prompt(&c, &a, 40, 9, 23, V);
    make_prompt(&d, 50, 24, V);
    make_prompt(&g, 60, 26, V);
    a.max_tokens = 24;
    b.max_tokens = c.max_tokens = 12;
    d.max_tokens = 40;
    a.temp = c.temp = 0.8f;
    a.seed = 5;
    c.seed = 6;
    out o[8];
    submit(&f, &a, &o[0]);
    run_followed(&f, &w, "a");
    submit(&f, &b, &o[1]); /* evicts a's tail */
    run_followed(&f, &w, "b");
    submit(&f, &a, &o[2]); /* a's head from the cache, c a fork of it beside */
    submit(&f, &c, &o[3]);
    run_followed(&f, &w, "a again and c");
    submit(&f, &d, &o[4]); /* cancelled after a few steps */
    for (int k = 0; k < 3; k++) {
        DCP_ASSERT_OK(dcp_engine_step(f.e));
        dcp_test_drain(f.e);
    }
    DCP_ASSERT_OK(dcp_engine_cancel(f.e, o[4].id));
    dcp_test_drain(f.e);
    submit(&f, &b, &o[5]);
    run_followed(&f, &w, "d cancelled, b again");
    /* n = 3 seeded choices of a prompt: one forked from choice 0 (two slots), one admitted later */
    static req e;
    make_prompt(&e, 30, 25, V);
    e.max_tokens = 10;
    e.temp = 0.9f;
    e.seed = 77;
    out oe[DCP_ENGINE_MAX_CHOICES];
    dcp_engine_request rq = DCP_ENGINE_REQUEST_DEFAULT;
    rq.prompt = e.prompt;
    rq.n_prompt = e.n;
    rq.max_tokens = e.max_tokens;
    rq.ignore_eos = true;
    rq.sampling.temperature = e.temp;
    rq.sampling.seed = e.seed;
    rq.n = 3;
    rq.user = oe;
    memset(oe, 0, sizeof oe);
    DCP_ASSERT_OK(dcp_engine_submit(f.e, &rq, &oe[0].id));
    run_followed(&f, &w, "n = 3");
    g.max_tokens = a.max_tokens = 8;
    submit(&f, &g, &o[6]); /* a's blocks off the device pages by now (to host with offload) */
    run_followed(&f, &w, "g");
    submit(&f, &a, &o[7]); /* a a third time: its blocks restored from host with offload */
    run_followed(&f, &w, "a a third time");
    char what[96];
    snprintf(what, sizeof what, "follower TP %u DCP %u%s", tp, dcp, host_blocks ? " with KV offload" : "");
    fprintf(stderr, "%s: %u plans, ops: %u truncate, %u free, %u attach, %u commit, %u fork; a again cached %u, c %u, "
            "b %u\n", what, w.plans, w.ops[DCP_ENGINE_OP_TRUNCATE], w.ops[DCP_ENGINE_OP_FREE],
            w.ops[DCP_ENGINE_OP_ATTACH], w.ops[DCP_ENGINE_OP_COMMIT], w.ops[DCP_ENGINE_OP_FORK], o[2].cached,
            o[3].cached, o[5].cached);
    assert_true(w.ops[DCP_ENGINE_OP_FORK] >= 1);
    assert_true(w.ops[DCP_ENGINE_OP_TRUNCATE] > 0 && w.ops[DCP_ENGINE_OP_FREE] > 0);
    assert_true(w.ops[DCP_ENGINE_OP_ATTACH] >= 3 && w.ops[DCP_ENGINE_OP_COMMIT] > 0);
    assert_true(o[2].cached > 0 && o[3].cached > 0 && o[5].cached > 0);
    dcp_prefix_cache_stats ps;
    dcp_model_state_prefix_stats(f.s, &ps);
    assert_true(ps.evictions > 0);
    if (host_blocks) {
        print_offload(what, &f);
        dcp_engine_stats es;
        dcp_engine_get_stats(f.e, &es);
        assert_int_equal(ps.host_capacity, host_blocks);
        assert_true(es.offload_to_host_blocks > 0 && es.offload_to_device_blocks > 0); /* restored from host */
        assert_true(es.offload_host_evictions > 0);                                     /* the host pool filled */
    }
    memcpy(res, o, 8 * sizeof *o);
    memcpy(res + 8, oe, 3 * sizeof *oe);
    dcp_engine_destroy(f.e);
    f.e = NULL;
    for (uint32_t q = 0; q < sc.max_seqs; q++) dcp_model_state_free_seq(w.s, q); /* frees no plan carried */
    DCP_ASSERT_OK(dcp_model_state_set_prefix_caching(w.s, false));
    dcp_model_state_destroy(w.s);
    ec = (dcp_engine_config)DCP_ENGINE_CONFIG_DEFAULT;
    DCP_ASSERT_OK(dcp_engine_create(f.s, f.tok, &ec, &f.e));
    /* computed without the cache (and without drafts): the same tokens */
    static req a8;
    a8 = a;
    a.max_tokens = 24;
    const req *rs[] = {&a, &b, &a, &c, NULL, &b, &g, &a8};
    for (uint32_t k = 0; k < 8; k++) {
        if (!rs[k]) continue;
        out x;
        submit(&f, rs[k], &x);
        run(&f);
        assert_same(what, k, &o[k], &x);
    }
    for (uint32_t i = 0; i < 3; i++) { /* choice i: a request of the choice's seed */
        req ei = e;
        ei.seed = dcp_engine_choice_seed(e.seed, i);
        out x;
        submit(&f, &ei, &x);
        run(&f);
        assert_same(what, 8 + i, &oe[i], &x);
    }
    fx_close(&f);
}

static void assert_same_outs(const char *what, const out *a, const out *b)
{
    for (uint32_t k = 0; k < FOLLOW_OUTS; k++)
        if (k != 4) assert_same(what, k, &a[k], &b[k]); /* 4: cancelled */
}

/* The trace at TP 1 and TP 8 / DCP 2, without and with KV offload (a host pool of 12 blocks, so
 * that it fills and evicts): the same tokens with blocks from host memory as without, and at
 * TP 8 / DCP 2 as at TP 1 (its logits are within 1e-4 of TP 1's, not bitwise: on this trace no
 * token changes). */
static void test_followers(void **state)
{
    (void)state;
    static out tp1[FOLLOW_OUTS], tp1_off[FOLLOW_OUTS], tp8[FOLLOW_OUTS], tp8_off[FOLLOW_OUTS];
    follower_trace(1, 1, 0, tp1);
    follower_trace(1, 1, 12, tp1_off);
    assert_same_outs("TP 1: with KV offload against without", tp1_off, tp1);
    follower_trace(8, 2, 0, tp8);
    follower_trace(8, 2, 12, tp8_off);
    assert_same_outs("TP 8 / DCP 2: with KV offload against without", tp8_off, tp8);
    assert_same_outs("TP 8 / DCP 2 with KV offload against TP 1", tp8_off, tp1);
}

/* The chain's seed covers the KV dtype; MPI followers (on_plan) take caching and KV offload. */
static void test_seed_followers(void **state)
{
    (void)state;
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 64;
    fixture f, g;
    fx_open(&f, SRC_GEN_HD32, 1, 1, &sc, true);
    sc.kv_dtype = DCP_DTYPE_Q8_0;
    fx_open(&g, SRC_GEN_HD32, 1, 1, &sc, true);
    dcp_prefix_cache_stats a, b;
    dcp_model_state_prefix_stats(f.s, &a);
    dcp_model_state_prefix_stats(g.s, &b);
    assert_true(a.enabled && b.enabled && a.seed != b.seed);
    fx_close(&g);
    dcp_engine_destroy(f.e);
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    ec.enable_prefix_caching = true;
    ec.on_plan = no_plan;
    DCP_ASSERT_OK(dcp_engine_create(f.s, f.tok, &ec, &f.e)); /* followers: caching on */
    assert_true(dcp_model_state_prefix_caching(f.s));
    fx_close(&f);
    sc.kv_offload_bytes = 1ull << 20; /* KV offload with followers: on, its host pool there */
    fx_open(&f, SRC_GEN_HD32, 1, 1, &sc, true);
    const uint64_t bb = block_bytes(&f);
    dcp_engine_destroy(f.e);
    DCP_ASSERT_OK(dcp_engine_create(f.s, f.tok, &ec, &f.e));
    assert_true(dcp_model_state_prefix_caching(f.s));
    dcp_model_state_prefix_stats(f.s, &a);
    assert_int_equal(a.host_capacity, sc.kv_offload_bytes / bb);
    dcp_engine_destroy(f.e);
    ec = (dcp_engine_config)DCP_ENGINE_CONFIG_DEFAULT;
    DCP_ASSERT_OK(dcp_engine_create(f.s, f.tok, &ec, &f.e));
    assert_false(dcp_model_state_prefix_caching(f.s));
    fx_close(&f);
}

/* ---- KV offload to host memory ---------------------------------------------------------------- */

/* test_lru's trace with a host pool: a's blocks evicted from the device pages go to host memory,
 * and a's second run takes all of its blocks back (4 from the device, 5 restored from host) with
 * its tokens bitwise those computed; with a host pool of 3 blocks the oldest host blocks (a's
 * tail first) are evicted and a's second run restores the 3 that stayed. */
static void offload_lru(uint32_t host_blocks, uint32_t want_cached, uint32_t want_restored, uint64_t want_host_ev)
{
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 128;
    sc.max_seqs = 2;
    sc.max_rows = 16;
    sc.block_size = 4;
    sc.kv_pages = 16;
    fixture f;
    fx_open(&f, SRC_STORIES, 1, 1, &sc, true);
    const uint64_t bb = block_bytes(&f);
    fx_close(&f);
    sc.kv_offload_bytes = host_blocks * bb + bb / 2;
    fx_open(&f, SRC_STORIES, 1, 1, &sc, true);
    dcp_prefix_cache_stats ps;
    dcp_model_state_prefix_stats(f.s, &ps);
    assert_int_equal(ps.host_capacity, host_blocks);
    const uint32_t V = f.cfg.n_vocab;
    static req a, b;
    make_prompt(&a, 40, 3, V);
    make_prompt(&b, 40, 4, V);
    a.max_tokens = b.max_tokens = 2;
    out o[4];
    submit(&f, &a, &o[0]);
    run(&f);
    submit(&f, &b, &o[1]); /* evicts a's tail (5 blocks) from the device pages: to host */
    run(&f);
    dcp_model_state_prefix_stats(f.s, &ps);
    assert_int_equal(ps.evictions, 5);
    assert_int_equal(ps.offloaded_blocks, 5);
    assert_int_equal(ps.offloaded_bytes, 5 * bb);
    assert_int_equal(ps.host_blocks, host_blocks < 5 ? host_blocks : 5);
    submit(&f, &b, &o[2]); /* all of b hits on the device; a's block 4 goes to host */
    run(&f);
    assert_int_equal(o[2].cached, 36);
    assert_same("b again", 1, &o[2], &o[1]);
    submit(&f, &a, &o[3]);
    run(&f);
    char what[96];
    snprintf(what, sizeof what, "offload, host pool of %u blocks", host_blocks);
    print_offload(what, &f);
    dcp_model_state_prefix_stats(f.s, &ps);
    assert_int_equal(o[3].cached, want_cached);
    assert_int_equal(ps.restored_blocks, want_restored);
    assert_int_equal(ps.restored_bytes, want_restored * bb);
    assert_int_equal(ps.host_evictions, want_host_ev);
    /* every block that went to host came back, is there, or was evicted from there */
    assert_int_equal(ps.offloaded_blocks, ps.restored_blocks + ps.host_blocks + ps.host_evictions);
    assert_same("a restored", 0, &o[3], &o[0]);
    fx_close(&f);
    /* computed without the cache: the same tokens */
    sc.kv_offload_bytes = 0;
    fx_open(&f, SRC_STORIES, 1, 1, &sc, false);
    out c;
    submit(&f, &a, &c);
    run(&f);
    assert_same("a computed", 0, &o[3], &c);
    fx_close(&f);
}

static void test_offload_lru(void **state)
{
    (void)state;
    offload_lru(16, 36, 5, 0); /* blocks 0..3 on the device, 4..8 restored */
    /* A host pool of 3: b's run sends a's blocks 9..5 there (9 and 8 evicted), b's second run a's
     * block 4 (7 evicted): a's second run hits blocks 0..6, restoring 4..6; its own evictions
     * send more there (2 more host evictions). */
    offload_lru(3, 28, 3, 5);
}

/* Exact over the caches: a pool too small for two prompts, so that A's blocks go to host while B
 * runs; then A again and C (a fork of A) batched: A's prefix comes from the device and host, its
 * tokens (and C's) bitwise those of each request alone without caching. */
static void offload_exact_host(src_kind src, uint32_t tp, uint32_t dcp, uint32_t block, dcp_dtype kv, uint32_t plen,
                               uint64_t host_bytes, uint32_t min_segments)
{
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = plen + 32;
    sc.max_seqs = 2;
    sc.max_rows = 32;
    sc.block_size = block;
    sc.kv_dtype = kv;
    const uint32_t P = (plen + 8 + block * dcp - 1) / (block * dcp) + 1; /* a request's pages per rank */
    sc.kv_pages = P + (P / 4 ? P / 4 : 1); /* A and B do not both stay on the device */
    sc.kv_offload_bytes = host_bytes;
    fixture f;
    fx_open(&f, src, tp, dcp, &sc, true);
    dcp_prefix_cache_stats ps;
    dcp_model_state_prefix_stats(f.s, &ps);
    assert_true(ps.host_segments >= min_segments);
    const uint32_t V = f.cfg.n_vocab;
    static req r[4];
    make_prompt(&r[0], plen, 5, V);
    make_prompt(&r[1], plen, 6, V);
    r[2] = r[0];
    fork_prompt(&r[3], &r[0], plen * 2 / 3, plen / 4, 7, V);
    for (uint32_t k = 0; k < 4; k++) {
        r[k].max_tokens = 5;
        r[k].temp = k % 2 ? 0.0f : 0.8f;
        r[k].seed = 40 + k;
    }
    r[2].temp = 0.0f;
    out with[4], without[4];
    submit(&f, &r[0], &with[0]);
    run(&f);
    submit(&f, &r[1], &with[1]);
    run(&f);
    dcp_model_state_prefix_stats(f.s, &ps);
    assert_true(ps.offloaded_blocks > 0);
    /* blocks in a segment past the first (slots are taken lowest first) */
    if (min_segments > 1) assert_true(ps.host_blocks > ps.host_segment_blocks);
    submit(&f, &r[2], &with[2]);
    submit(&f, &r[3], &with[3]);
    run(&f);
    dcp_model_state_prefix_stats(f.s, &ps);
    char what[128];
    snprintf(what, sizeof what, "offload exact %s TP %u DCP %u block %u %s, prompts of %u (A again hit %u), "
             "host pool in %u segments", src == SRC_STORIES ? "stories260K" : src == SRC_GEN_HD32 ? "llama-hd32"
             : src == SRC_DS2 ? "deepseek2" : "deepseek2-kv64", tp, dcp, block, dcp_dtype_name(kv), plen,
             with[2].cached, ps.host_segments);
    print_offload(what, &f);
    assert_true(ps.restored_blocks > 0);
    assert_true(with[2].cached >= (plen - 1) / (block * dcp) * (block * dcp) - block * dcp);
    fx_close(&f);
    sc.kv_offload_bytes = 0;
    fx_open(&f, src, tp, dcp, &sc, false);
    for (uint32_t k = 0; k < 4; k++) {
        submit(&f, &r[k], &without[k]);
        run(&f);
        assert_same(what, k, &with[k], &without[k]);
    }
    fx_close(&f);
}

static void offload_exact(src_kind src, uint32_t tp, uint32_t dcp, uint32_t block, dcp_dtype kv, uint32_t plen)
{
    offload_exact_host(src, tp, dcp, block, kv, plen, 64ull << 20, 1);
}

static void test_offload_exact(void **state)
{
    (void)state;
    offload_exact(SRC_STORIES, 1, 1, 8, DCP_DTYPE_F16, 120);      /* GQA f16, TP 1 */
    offload_exact(SRC_STORIES, 8, 2, 8, DCP_DTYPE_F16, 120);      /* TP 8, DCP 2 */
    offload_exact(SRC_GEN_HD32, 1, 1, 8, DCP_DTYPE_Q8_0, 120);    /* q8_0 KV */
    offload_exact(SRC_DS2, 1, 1, 8, DCP_DTYPE_F16, 120);          /* MLA latent cache (K only) */
    offload_exact(SRC_DS2_Q8, 4, 4, 8, DCP_DTYPE_Q8_0, 120);      /* MLA q8_0 latent rows, DCP 4 */
}

/* The host pool in several segments: with $DCP_VK_MAX_STORAGE_RANGE at 128 KiB a host pool of
 * 1 MiB splits into buffers of whole blocks, and A's offloaded blocks fill more than the first;
 * the tokens stay bitwise those computed without caching. At TP 1 only: a range below what one
 * rank's KV of a 400-token prompt takes is below the TP communicator's put area at TP > 1 (and
 * stories260K's context is 512 tokens), so no TP > 1 configuration of the test models fits. */
static void test_offload_segments(void **state)
{
    (void)state;
    /* 128 KiB: stories260K's largest weight matrix (512 x 64 F32) still fits one binding */
    assert_int_equal(setenv("DCP_VK_MAX_STORAGE_RANGE", "131072", 1), 0);
    offload_exact_host(SRC_STORIES, 1, 1, 8, DCP_DTYPE_F16, 400, 1ull << 20, 2);
    assert_int_equal(unsetenv("DCP_VK_MAX_STORAGE_RANGE"), 0);
}

int main(int argc, char **argv)
{
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_chain),   cmocka_unit_test(test_sharing_cancel), cmocka_unit_test(test_lru),
        cmocka_unit_test(test_preemption),   cmocka_unit_test(test_dcp_rule_2), cmocka_unit_test(test_dcp_rule_4),
        cmocka_unit_test(test_dcp_rule_8),       cmocka_unit_test(test_models), cmocka_unit_test(test_forks),
        cmocka_unit_test(test_seed_followers), cmocka_unit_test(test_speculation), cmocka_unit_test(test_followers),
        cmocka_unit_test(test_offload_lru),  cmocka_unit_test(test_offload_exact),
        cmocka_unit_test(test_offload_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
