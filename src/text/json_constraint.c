/* JSON-constrained decoding (include/dcpvk/json_constraint.h): a small JSON reader for the schema,
 * its compilation into a table of nodes, a pushdown recognizer of valid prefixes (the state is a
 * stack of frames, one per open value) and the vocabulary mask, which walks the tokens in sorted
 * byte order so that tokens sharing a prefix share its recognizer steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dcpvk/json_constraint.h"

enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_INT = 16, T_BOOL = 32, T_NULL = 64, T_ALL = 127 };
enum { MAX_PROPS = 64, MAX_ENUM = 64, MAX_SCHEMA_DEPTH = 16, INT_DIGITS = 15, FRAC_DIGITS = 16, EXP_DIGITS = 3 };

/* ---- a small JSON reader (schema text into a tree) ------------------------------------------- */

typedef enum { JV_NULL, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ } jv_kind;

typedef struct jv {
    jv_kind kind;
    bool b;
    double num;
    const char *raw;          /* the value's text in the schema [raw_len] */
    size_t raw_len;
    const char *key;          /* in an object: the member's name as written, without quotes [key_len] */
    size_t key_len;
    struct jv *child, *next;  /* arrays and objects: the members in order */
} jv;

typedef struct reader {
    const char *s;
    size_t n, i;
    int depth;
    char err[160];
} reader;

static void jv_free(jv *v)
{
    while (v) {
        jv *nx = v->next;
        jv_free(v->child);
        free(v);
        v = nx;
    }
}

static void skip_ws(reader *r)
{
    while (r->i < r->n && (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r')) r->i++;
}

static bool rd_fail(reader *r, const char *what)
{
    if (!r->err[0]) snprintf(r->err, sizeof r->err, "%s at byte %zu", what, r->i);
    return false;
}

/* A string at r->i (the opening quote): its content span. Escapes are checked, not decoded. */
static bool rd_string(reader *r, const char **p, size_t *len)
{
    r->i++;
    const size_t start = r->i;
    while (r->i < r->n && r->s[r->i] != '"') {
        unsigned char c = (unsigned char)r->s[r->i];
        if (c < 0x20) return rd_fail(r, "a control character in a string");
        if (c == '\\') {
            if (++r->i >= r->n) break;
            c = (unsigned char)r->s[r->i];
            if (c == 'u') {
                for (int k = 0; k < 4; k++) {
                    if (++r->i >= r->n || !strchr("0123456789abcdefABCDEF", r->s[r->i]) || !r->s[r->i])
                        return rd_fail(r, "a bad \\u escape");
                }
            } else if (!c || !strchr("\"\\/bfnrt", c)) {
                return rd_fail(r, "a bad escape");
            }
        }
        r->i++;
    }
    if (r->i >= r->n) return rd_fail(r, "an unterminated string");
    *p = r->s + start;
    *len = r->i - start;
    r->i++;
    return true;
}

static jv *rd_value(reader *r);

static bool rd_members(reader *r, jv *v, bool obj)
{
    const char close = obj ? '}' : ']';
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->s[r->i] == close) {
        r->i++;
        return true;
    }
    jv **tail = &v->child;
    for (;;) {
        skip_ws(r);
        const char *k = NULL;
        size_t kl = 0;
        if (obj) {
            if (r->i >= r->n || r->s[r->i] != '"') return rd_fail(r, "expected a member name");
            if (!rd_string(r, &k, &kl)) return false;
            skip_ws(r);
            if (r->i >= r->n || r->s[r->i] != ':') return rd_fail(r, "expected ':'");
            r->i++;
            skip_ws(r);
        }
        jv *c = rd_value(r);
        if (!c) return false;
        c->key = k;
        c->key_len = kl;
        *tail = c;
        tail = &c->next;
        skip_ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == close) {
            r->i++;
            return true;
        }
        return rd_fail(r, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static jv *rd_value(reader *r)
{
    skip_ws(r);
    if (r->i >= r->n) return rd_fail(r, "unexpected end"), NULL;
    if (r->depth > 64) return rd_fail(r, "nesting deeper than 64"), NULL;
    jv *v = calloc(1, sizeof *v);
    if (!v) return rd_fail(r, "out of memory"), NULL;
    const size_t start = r->i;
    const char c = r->s[r->i];
    bool ok = true;
    r->depth++;
    if (c == '{' || c == '[') {
        v->kind = c == '{' ? JV_OBJ : JV_ARR;
        ok = rd_members(r, v, c == '{');
    } else if (c == '"') {
        const char *p;
        size_t l;
        v->kind = JV_STR;
        ok = rd_string(r, &p, &l);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        v->kind = JV_NUM;
        char *end = NULL;
        char buf[64];
        size_t l = 0;
        while (r->i + l < r->n && l < sizeof buf - 1 && strchr("+-.eE0123456789", r->s[r->i + l]) && r->s[r->i + l]) l++;
        memcpy(buf, r->s + r->i, l);
        buf[l] = 0;
        v->num = strtod(buf, &end);
        if (end == buf) ok = rd_fail(r, "a bad number");
        r->i += (size_t)(end - buf);
    } else if (r->n - r->i >= 4 && memcmp(r->s + r->i, "true", 4) == 0) {
        v->kind = JV_BOOL, v->b = true, r->i += 4;
    } else if (r->n - r->i >= 5 && memcmp(r->s + r->i, "false", 5) == 0) {
        v->kind = JV_BOOL, r->i += 5;
    } else if (r->n - r->i >= 4 && memcmp(r->s + r->i, "null", 4) == 0) {
        v->kind = JV_NULL, r->i += 4;
    } else {
        ok = rd_fail(r, "not a JSON value");
    }
    r->depth--;
    if (!ok) {
        jv_free(v);
        return NULL;
    }
    v->raw = r->s + start;
    v->raw_len = r->i - start;
    return v;
}

static bool key_is(const jv *m, const char *name) { return m->key_len == strlen(name) && memcmp(m->key, name, m->key_len) == 0; }

/* ---- the compiled schema ---------------------------------------------------------------------- */

typedef struct jnode {
    unsigned types;           /* T_* the value may be */
    uint32_t lit0, n_lit;     /* enum / const: literals [lit0, lit0 + n_lit) (n_lit 0: none) */
    uint32_t prop0, n_props;  /* object: properties [prop0, prop0 + n_props) */
    uint64_t required;        /* bit p: property prop0 + p is required */
    int32_t addl;             /* node of additional properties' values; -1: none allowed */
    int32_t items;            /* node of array items */
    uint32_t min_items, max_items;
} jnode;

typedef struct jprop {
    uint32_t name, name_len;  /* the name as written (no quotes) in the pool */
    int32_t node;
} jprop;

struct dcp_json_schema {
    jnode *nodes;
    uint32_t n_nodes, cap_nodes;
    jprop *props;
    uint32_t n_props, cap_props;
    uint32_t *lit_off, *lit_len; /* literal texts (compact JSON) in the pool */
    uint32_t n_lits, cap_lits, cap_lits2;
    char *pool;
    size_t pool_len, pool_cap;
    int32_t root;
    dcp_status err;           /* compile's failure */
};

static const char *const builtin_lit[3] = {"true", "false", "null"};

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
    if (need <= *cap) return true;
    uint32_t c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static bool pool_add(dcp_json_schema *s, const char *p, size_t n, uint32_t *off)
{
    if (s->pool_len + n > s->pool_cap) {
        size_t c = s->pool_cap ? s->pool_cap * 2 : 256;
        while (c < s->pool_len + n) c *= 2;
        char *q = realloc(s->pool, c);
        if (!q) return false;
        s->pool = q;
        s->pool_cap = c;
    }
    memcpy(s->pool + s->pool_len, p, n);
    *off = (uint32_t)s->pool_len;
    s->pool_len += n;
    return true;
}

/* The value's text with the whitespace outside strings dropped (how the output must spell it). */
static bool add_literal(dcp_json_schema *s, const jv *v)
{
    if (!grow((void **)&s->lit_off, &s->cap_lits, s->n_lits + 1, sizeof *s->lit_off)) return false;
    if (!grow((void **)&s->lit_len, &s->cap_lits2, s->n_lits + 1, sizeof *s->lit_len)) return false;
    char *buf = malloc(v->raw_len + 1);
    if (!buf) return false;
    size_t k = 0;
    bool in_str = false;
    for (size_t i = 0; i < v->raw_len; i++) {
        const char c = v->raw[i];
        if (in_str) {
            buf[k++] = c;
            if (c == '\\') buf[k++] = v->raw[++i];
            else if (c == '"') in_str = false;
        } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            buf[k++] = c;
            in_str = c == '"';
        }
    }
    uint32_t off;
    const bool ok = pool_add(s, buf, k, &off);
    free(buf);
    if (!ok) return false;
    s->lit_off[s->n_lits] = off;
    s->lit_len[s->n_lits] = (uint32_t)k;
    s->n_lits++;
    return true;
}

static unsigned type_of_literal(char c)
{
    switch (c) {
    case '{': return T_OBJ;
    case '[': return T_ARR;
    case '"': return T_STR;
    case 't':
    case 'f': return T_BOOL;
    case 'n': return T_NULL;
    default: return T_NUM | T_INT;
    }
}

static int32_t new_node(dcp_json_schema *s)
{
    if (!grow((void **)&s->nodes, &s->cap_nodes, s->n_nodes + 1, sizeof *s->nodes)) return -1;
    s->nodes[s->n_nodes] = (jnode){.types = T_ALL, .addl = 0, .items = 0, .max_items = UINT32_MAX};
    return (int32_t)s->n_nodes++;
}

#define CFAIL(st, ...) (s->err = dcp_fail(st, __VA_ARGS__), -2)
#define RAW(v) (int)((v)->raw_len > 40 ? 40 : (v)->raw_len), (v)->raw

static bool get_count(const jv *v, uint32_t *out)
{
    if (v->kind != JV_NUM || v->num < 0 || v->num > 4294967295.0 || v->num != (double)(uint64_t)v->num) return false;
    *out = (uint32_t)v->num;
    return true;
}

/* Compiles schema v (at nesting depth) into a node; returns its index, or -2 with the error set. */
static int32_t compile(dcp_json_schema *s, const jv *v, int depth)
{
    if (depth > MAX_SCHEMA_DEPTH)
        return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: nested deeper than %d schemas", MAX_SCHEMA_DEPTH);
    if (v->kind == JV_BOOL) {
        if (v->b) return 0;
        return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: the schema false matches no value");
    }
    if (v->kind != JV_OBJ)
        return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: a schema must be an object or a boolean, not %.*s",
                     RAW(v));
    const int32_t id = new_node(s);
    if (id < 0) return CFAIL(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    const jv *properties = NULL, *required = NULL, *en = NULL, *cn = NULL;
    unsigned types = T_ALL;
    uint32_t min_items = 0, max_items = UINT32_MAX;
    int32_t addl = 0, items = 0;
    for (const jv *m = v->child; m; m = m->next) {
        if (key_is(m, "type")) {
            static const struct { const char *name; unsigned bits; } names[] = {
                {"object", T_OBJ}, {"array", T_ARR}, {"string", T_STR}, {"number", T_NUM | T_INT},
                {"integer", T_INT}, {"boolean", T_BOOL}, {"null", T_NULL}};
            const jv *one = m->kind == JV_ARR ? m->child : m;
            if (m->kind != JV_STR && m->kind != JV_ARR)
                return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: 'type' must be a string or an array of strings");
            types = 0;
            for (; one; one = m->kind == JV_ARR ? one->next : NULL) {
                unsigned bits = 0;
                for (size_t i = 0; i < sizeof names / sizeof names[0] && one->kind == JV_STR; i++)
                    if (one->raw_len == strlen(names[i].name) + 2 && memcmp(one->raw + 1, names[i].name, one->raw_len - 2) == 0)
                        bits = names[i].bits;
                if (!bits)
                    return CFAIL(DCP_ERR_UNSUPPORTED, "json schema: type %.*s is not supported (object, array, string, "
                                 "number, integer, boolean, null)", RAW(one));
                types |= bits;
            }
            if (!types) return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: 'type' is an empty array");
        } else if (key_is(m, "enum")) {
            if (m->kind != JV_ARR) return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: 'enum' must be an array");
            en = m;
        } else if (key_is(m, "const")) {
            cn = m;
        } else if (key_is(m, "properties")) {
            if (m->kind != JV_OBJ) return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: 'properties' must be an object");
            properties = m;
        } else if (key_is(m, "required")) {
            if (m->kind != JV_ARR) return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: 'required' must be an array");
            required = m;
        } else if (key_is(m, "additionalProperties")) {
            if ((addl = compile(s, m, depth + 1)) == -2) {
                if (m->kind == JV_BOOL && !m->b) addl = -1, dcp_clear_error();
                else return -2;
            }
        } else if (key_is(m, "items")) {
            if (m->kind == JV_ARR)
                return CFAIL(DCP_ERR_UNSUPPORTED, "json schema: 'items' as an array (tuples) is not supported");
            if ((items = compile(s, m, depth + 1)) == -2) return -2;
        } else if (key_is(m, "minItems")) {
            if (!get_count(m, &min_items))
                return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: 'minItems' must be an integer >= 0");
        } else if (key_is(m, "maxItems")) {
            if (!get_count(m, &max_items))
                return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: 'maxItems' must be an integer >= 0");
        } else if (key_is(m, "title") || key_is(m, "description") || key_is(m, "default") || key_is(m, "examples") ||
                   key_is(m, "$schema") || key_is(m, "$id") || key_is(m, "$comment")) {
            /* annotations: no effect on the output */
        } else {
            return CFAIL(DCP_ERR_UNSUPPORTED, "json schema: keyword '%.*s' is not supported (supported: type, enum, "
                         "const, required, properties, additionalProperties, items, minItems, maxItems)",
                         (int)(m->key_len > 64 ? 64 : m->key_len), m->key);
        }
    }
    if (min_items > max_items)
        return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: minItems %u exceeds maxItems %u", min_items, max_items);
    int32_t kids[MAX_PROPS];
    uint32_t n_props = 0;
    for (const jv *p = properties ? properties->child : NULL; p; p = p->next, n_props++) {
        if (n_props >= MAX_PROPS)
            return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: more than %d properties in one object", MAX_PROPS);
        for (const jv *o = properties->child; o != p; o = o->next)
            if (o->key_len == p->key_len && memcmp(o->key, p->key, p->key_len) == 0)
                return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: property '%.*s' is given twice",
                             (int)p->key_len, p->key);
        if ((kids[n_props] = compile(s, p, depth + 1)) == -2) return -2;
    }
    /* the node's properties are contiguous: added after every child's own */
    const uint32_t prop0 = s->n_props;
    n_props = 0;
    for (const jv *p = properties ? properties->child : NULL; p; p = p->next, n_props++) {
        if (!grow((void **)&s->props, &s->cap_props, s->n_props + 1, sizeof *s->props))
            return CFAIL(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        jprop *np = &s->props[s->n_props];
        if (!pool_add(s, p->key, p->key_len, &np->name)) return CFAIL(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        np->name_len = (uint32_t)p->key_len;
        np->node = kids[n_props];
        s->n_props++;
    }
    uint64_t req = 0;
    for (const jv *r = required ? required->child : NULL; r; r = r->next) {
        if (r->kind != JV_STR)
            return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: 'required' must hold strings, not %.*s", RAW(r));
        uint32_t q = 0;
        while (q < n_props && !(s->props[prop0 + q].name_len == r->raw_len - 2 &&
                                memcmp(s->pool + s->props[prop0 + q].name, r->raw + 1, r->raw_len - 2) == 0))
            q++;
        if (q == n_props)
            return CFAIL(DCP_ERR_UNSUPPORTED, "json schema: required property %.*s is not in 'properties' (only "
                         "properties named there can be required)", RAW(r));
        req |= 1ull << q;
    }
    uint32_t lit0 = s->n_lits, n_lit = 0;
    const jv *lits = en ? en->child : cn;
    if (en && cn) return CFAIL(DCP_ERR_UNSUPPORTED, "json schema: 'enum' and 'const' together are not supported");
    for (const jv *l = lits; l; l = en ? l->next : NULL) {
        if (!(type_of_literal(l->raw[0]) & types)) continue; /* not of the type: no value matches it */
        if (n_lit >= MAX_ENUM) return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: more than %d enum values", MAX_ENUM);
        if (!add_literal(s, l)) return CFAIL(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        n_lit++;
    }
    if ((en || cn) && n_lit == 0)
        return CFAIL(DCP_ERR_INVALID_ARGUMENT, "json schema: %s matches no value", en ? "the enum" : "the const");
    jnode *nd = &s->nodes[id];
    nd->types = types;
    nd->lit0 = lit0;
    nd->n_lit = n_lit;
    nd->prop0 = prop0;
    nd->n_props = n_props;
    nd->required = req;
    nd->addl = addl;
    nd->items = items;
    nd->min_items = min_items;
    nd->max_items = max_items;
    return id;
}

dcp_status dcp_json_schema_compile(const char *text, size_t len, dcp_json_schema **out)
{
    *out = NULL;
    dcp_json_schema *s = calloc(1, sizeof *s);
    if (!s) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    dcp_status st = DCP_OK;
    jv *v = NULL;
    if (new_node(s) != 0) { /* node 0: any value (its objects and arrays hold any values) */
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    if (!text) {
        int32_t r = new_node(s);
        if (r < 0) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            goto fail;
        }
        s->nodes[r].types = T_OBJ;
        s->root = r;
        *out = s;
        return DCP_OK;
    }
    reader rd = {.s = text, .n = len};
    v = rd_value(&rd);
    if (v) {
        skip_ws(&rd);
        if (rd.i != rd.n) rd_fail(&rd, "text after the schema");
    }
    if (!v || rd.err[0]) {
        st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "json schema: not valid JSON: %s", rd.err);
        goto fail;
    }
    s->root = compile(s, v, 0);
    if (s->root == -2) {
        st = s->err;
        goto fail;
    }
    jv_free(v);
    *out = s;
    return DCP_OK;
fail:
    jv_free(v);
    dcp_json_schema_destroy(s);
    return st;
}

void dcp_json_schema_destroy(dcp_json_schema *s)
{
    if (!s) return;
    free(s->nodes);
    free(s->props);
    free(s->lit_off);
    free(s->lit_len);
    free(s->pool);
    free(s);
}

/* ---- the recognizer --------------------------------------------------------------------------- */

enum { F_ROOT, F_OBJ, F_ARR, F_STR, F_NUM, F_LIT };
/* object phases */
enum { O_OPEN, O_KEY, O_COLON, O_VALUE, O_AFTER, O_COMMA };
/* array phases */
enum { A_OPEN, A_AFTER, A_COMMA };
/* number phases */
enum { N_SIGN, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

typedef struct jframe {
    uint8_t kind, phase;
    uint8_t ws;               /* whitespace bytes in the current gap */
    uint8_t esc;              /* strings and keys: 0; 1 after '\'; 10 + k: k hex digits of \u left */
    uint8_t u8n, u8lo, u8hi;  /* UTF-8: continuation bytes left, the range of the next one */
    uint8_t builtin;          /* literal: true/false/null (else the node's enum) */
    int32_t node;
    int32_t prop;             /* object: the current key's property (-1: an additional one) */
    uint32_t n;               /* array: items; key and literal: bytes so far; number: digits of this part */
    uint64_t used;            /* object: properties given */
    uint64_t cand;            /* key: properties its bytes still match; literal: literals still matched */
} jframe;

struct dcp_json_state {
    const dcp_json_schema *s;
    uint32_t depth;
    jframe f[DCP_JSON_MAX_DEPTH];
    dcp_json_state *walk;     /* [max token length + 1] scratch of the mask (NULL until needed) */
    size_t walk_cap;
};

enum { R_REJECT, R_ACCEPT, R_DONE /* consumed, the value ended */, R_RETRY /* ended before it */ };

static bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* A gap's whitespace: R_ACCEPT, or R_REJECT past the limit. */
static int gap_ws(jframe *f) { return f->ws < DCP_JSON_MAX_WS ? (f->ws++, R_ACCEPT) : R_REJECT; }

/* String content byte c (after the opening quote): R_ACCEPT, R_DONE (the closing quote), R_REJECT. */
static int str_byte(jframe *f, uint8_t c)
{
    if (f->u8n) {
        if (c < f->u8lo || c > f->u8hi) return R_REJECT;
        f->u8n--;
        f->u8lo = 0x80, f->u8hi = 0xBF;
        return R_ACCEPT;
    }
    if (f->esc == 1) {
        if (c == 'u') f->esc = 14;
        else if (c && strchr("\"\\/bfnrt", c)) f->esc = 0;
        else return R_REJECT;
        return R_ACCEPT;
    }
    if (f->esc > 10) {
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return R_REJECT;
        f->esc = f->esc == 11 ? 0 : (uint8_t)(f->esc - 1);
        return R_ACCEPT;
    }
    if (c == '"') return R_DONE;
    if (c == '\\') f->esc = 1;
    else if (c < 0x20) return R_REJECT;
    else if (c < 0x80) return R_ACCEPT;
    else if (c >= 0xC2 && c <= 0xDF) f->u8n = 1, f->u8lo = 0x80, f->u8hi = 0xBF;
    else if (c == 0xE0) f->u8n = 2, f->u8lo = 0xA0, f->u8hi = 0xBF;
    else if (c == 0xED) f->u8n = 2, f->u8lo = 0x80, f->u8hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) f->u8n = 2, f->u8lo = 0x80, f->u8hi = 0xBF;
    else if (c == 0xF0) f->u8n = 3, f->u8lo = 0x90, f->u8hi = 0xBF;
    else if (c >= 0xF1 && c <= 0xF3) f->u8n = 3, f->u8lo = 0x80, f->u8hi = 0xBF;
    else if (c == 0xF4) f->u8n = 3, f->u8lo = 0x80, f->u8hi = 0x8F;
    else return R_REJECT;
    return R_ACCEPT;
}

static const char *lit_text(const dcp_json_schema *s, const jframe *f, uint32_t i, uint32_t *len)
{
    if (f->builtin) {
        *len = (uint32_t)strlen(builtin_lit[i]);
        return builtin_lit[i];
    }
    const jnode *nd = &s->nodes[f->node];
    *len = s->lit_len[nd->lit0 + i];
    return s->pool + s->lit_off[nd->lit0 + i];
}

/* Opens a value of node on byte c (not whitespace) in a new frame: R_ACCEPT or R_DONE (when c alone
 * is the whole value) or R_REJECT (nothing pushed). */
static int start_value(dcp_json_state *st, int32_t node, uint8_t c)
{
    if (st->depth >= DCP_JSON_MAX_DEPTH) return R_REJECT;
    const dcp_json_schema *s = st->s;
    const jnode *nd = &s->nodes[node];
    jframe f = {.node = node, .u8lo = 0x80, .u8hi = 0xBF, .prop = -1};
    if (nd->n_lit || ((c == 't' || c == 'f') && (nd->types & T_BOOL)) || (c == 'n' && (nd->types & T_NULL))) {
        f.kind = F_LIT;
        f.builtin = nd->n_lit == 0;
        const uint32_t n = f.builtin ? 3 : nd->n_lit;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t len;
            const char *t = lit_text(s, &f, i, &len);
            if (len && (uint8_t)t[0] == c) f.cand |= 1ull << i;
        }
        if (!f.cand) return R_REJECT;
        f.n = 1;
        bool all_end = true;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t len;
            lit_text(s, &f, i, &len);
            if ((f.cand >> i & 1) && len != 1) all_end = false;
        }
        if (all_end) return R_DONE;
    } else if (c == '{' && (nd->types & T_OBJ)) {
        f.kind = F_OBJ, f.phase = O_OPEN;
    } else if (c == '[' && (nd->types & T_ARR)) {
        f.kind = F_ARR, f.phase = A_OPEN;
    } else if (c == '"' && (nd->types & T_STR)) {
        f.kind = F_STR;
    } else if ((c == '-' || (c >= '0' && c <= '9')) && (nd->types & (T_NUM | T_INT))) {
        f.kind = F_NUM;
        f.phase = c == '-' ? N_SIGN : c == '0' ? N_ZERO : N_INT;
        f.n = c == '-' ? 0 : 1;
    } else {
        return R_REJECT;
    }
    st->f[st->depth++] = f;
    return R_ACCEPT;
}

static bool obj_required_ok(const dcp_json_schema *s, const jframe *f)
{
    return (s->nodes[f->node].required & ~f->used) == 0;
}

static uint64_t obj_unused(const dcp_json_schema *s, const jframe *f)
{
    const uint32_t n = s->nodes[f->node].n_props;
    const uint64_t all = n >= 64 ? ~0ull : (1ull << n) - 1;
    return all & ~f->used;
}

/* Top frame f takes byte c. Pushing a child is done here (the byte goes to the child). */
static int frame_byte(dcp_json_state *st, uint8_t c)
{
    const dcp_json_schema *s = st->s;
    jframe *f = &st->f[st->depth - 1];
    const jnode *nd = &s->nodes[f->node];
    switch (f->kind) {
    case F_ROOT:
        if (f->phase == 1) return R_REJECT;
        if (is_ws(c)) return gap_ws(f);
        f->phase = 1; /* set before the push: f is not valid after it */
        {
            int r = start_value(st, s->root, c);
            if (r == R_REJECT) f->phase = 0;
            else if (r == R_DONE) return R_ACCEPT;
            return r;
        }
    case F_STR: return str_byte(f, c);
    case F_LIT: {
        const uint32_t n = f->builtin ? 3 : nd->n_lit;
        uint64_t next = 0;
        bool some_end = false, all_end = true;
        for (uint32_t i = 0; i < n; i++) {
            if (!(f->cand >> i & 1)) continue;
            uint32_t len;
            const char *t = lit_text(s, f, i, &len);
            if (len == f->n) some_end = true;
            if (f->n < len && (uint8_t)t[f->n] == c) {
                next |= 1ull << i;
                if (len != f->n + 1) all_end = false;
            }
        }
        if (!next) return some_end ? R_RETRY : R_REJECT;
        f->cand = next;
        f->n++;
        return all_end ? R_DONE : R_ACCEPT;
    }
    case F_NUM: {
        const bool digit = c >= '0' && c <= '9', int_only = !(nd->types & T_NUM);
        switch (f->phase) {
        case N_SIGN:
            if (digit) return f->phase = c == '0' ? N_ZERO : N_INT, f->n = 1, R_ACCEPT;
            return R_REJECT;
        case N_ZERO:
        case N_INT:
            if (digit && f->phase == N_INT && f->n < INT_DIGITS) return f->n++, R_ACCEPT;
            if (c == '.' && !int_only) return f->phase = N_DOT, f->n = 0, R_ACCEPT;
            if ((c == 'e' || c == 'E') && !int_only) return f->phase = N_E, f->n = 0, R_ACCEPT;
            return digit && f->phase == N_ZERO ? R_REJECT : R_RETRY;
        case N_DOT:
            if (digit) return f->phase = N_FRAC, f->n = 1, R_ACCEPT;
            return R_REJECT;
        case N_FRAC:
            if (digit && f->n < FRAC_DIGITS) return f->n++, R_ACCEPT;
            if (c == 'e' || c == 'E') return f->phase = N_E, f->n = 0, R_ACCEPT;
            return digit ? R_REJECT : R_RETRY;
        case N_E:
            if (c == '+' || c == '-') return f->phase = N_ESIGN, R_ACCEPT;
            /* fall through */
        case N_ESIGN:
            if (digit) return f->phase = N_EXP, f->n = 1, R_ACCEPT;
            return R_REJECT;
        default: /* N_EXP */
            if (digit && f->n < EXP_DIGITS) return f->n++, R_ACCEPT;
            return digit ? R_REJECT : R_RETRY;
        }
    }
    case F_ARR:
        if (is_ws(c)) return f->phase == A_AFTER || f->phase == A_OPEN || f->phase == A_COMMA ? gap_ws(f) : R_REJECT;
        if (f->phase == A_OPEN && c == ']') return nd->min_items == 0 ? R_DONE : R_REJECT;
        if (f->phase == A_AFTER) {
            if (c == ',' && f->n < nd->max_items) return f->phase = A_COMMA, f->ws = 0, R_ACCEPT;
            if (c == ']' && f->n >= nd->min_items) return R_DONE;
            return R_REJECT;
        }
        if (f->n >= nd->max_items) return R_REJECT;
        f->phase = A_AFTER, f->ws = 0, f->n++;
        {
            int r = start_value(st, nd->items, c);
            if (r == R_REJECT) f->phase = f->n == 1 ? A_OPEN : A_COMMA, f->n--; /* undo (f still valid: nothing pushed) */
            return r == R_DONE ? R_ACCEPT : r;
        }
    case F_OBJ:
        switch (f->phase) {
        case O_OPEN:
        case O_COMMA:
            if (is_ws(c)) return gap_ws(f);
            if (c == '}' && f->phase == O_OPEN) return obj_required_ok(s, f) ? R_DONE : R_REJECT;
            if (c != '"') return R_REJECT;
            /* with additional keys allowed a key may match a given name while it is written (it can
             * still become another key); without, only the names not given yet */
            f->cand = nd->addl < 0 ? obj_unused(s, f) : obj_unused(s, &(jframe){.node = f->node});
            if (nd->addl < 0 && !f->cand) return R_REJECT;
            f->phase = O_KEY, f->n = 0, f->ws = 0, f->esc = 0, f->u8n = 0;
            return R_ACCEPT;
        case O_KEY: {
            const uint64_t cand = f->cand;
            const uint8_t esc = f->esc, u8n = f->u8n, lo = f->u8lo, hi = f->u8hi;
            const int r = str_byte(f, c);
            if (r == R_REJECT) return R_REJECT;
            if (r == R_DONE) {
                int32_t prop = -1;
                for (uint32_t p = 0; p < nd->n_props; p++)
                    if ((cand >> p & 1) && s->props[nd->prop0 + p].name_len == f->n) prop = (int32_t)p;
                if (prop < 0 && nd->addl < 0) return R_REJECT;
                if (prop >= 0 && (f->used >> prop & 1)) return R_REJECT; /* given twice */
                f->prop = prop;
                if (prop >= 0) f->used |= 1ull << prop;
                f->phase = O_COLON;
                return R_ACCEPT;
            }
            uint64_t next = 0;
            for (uint32_t p = 0; p < nd->n_props; p++) {
                const jprop *pp = &s->props[nd->prop0 + p];
                if ((cand >> p & 1) && f->n < pp->name_len && (uint8_t)s->pool[pp->name + f->n] == c) next |= 1ull << p;
            }
            if (!next && nd->addl < 0) {
                f->esc = esc, f->u8n = u8n, f->u8lo = lo, f->u8hi = hi; /* unchanged on a reject */
                return R_REJECT;
            }
            f->cand = next;
            f->n++;
            return R_ACCEPT;
        }
        case O_COLON:
            if (is_ws(c)) return gap_ws(f);
            if (c != ':') return R_REJECT;
            f->phase = O_VALUE, f->ws = 0;
            return R_ACCEPT;
        case O_VALUE: {
            if (is_ws(c)) return gap_ws(f);
            const int32_t child = f->prop >= 0 ? s->props[nd->prop0 + (uint32_t)f->prop].node : nd->addl;
            f->phase = O_AFTER, f->ws = 0;
            int r = start_value(st, child, c);
            if (r == R_REJECT) f->phase = O_VALUE;
            return r == R_DONE ? R_ACCEPT : r;
        }
        default: /* O_AFTER */
            if (is_ws(c)) return gap_ws(f);
            if (c == '}') return obj_required_ok(s, f) ? R_DONE : R_REJECT;
            if (c == ',' && (nd->addl >= 0 || obj_unused(s, f))) return f->phase = O_COMMA, f->ws = 0, R_ACCEPT;
            return R_REJECT;
        }
    }
    return R_REJECT;
}

/* One byte; false: rejected, and st may be changed (callers feed a copy). */
static bool feed1(dcp_json_state *st, uint8_t c)
{
    for (;;) {
        const uint32_t d = st->depth;
        const int r = frame_byte(st, c);
        if (r == R_REJECT) return false;
        if (r == R_ACCEPT) {
            /* a push from start_value leaves the parent's gap counter reset already */
            return true;
        }
        if (r == R_DONE) {
            st->depth = d - 1; /* the value ended with c */
            return true;
        }
        st->depth = d - 1; /* R_RETRY: the value ended before c; its parent takes c */
        if (st->depth == 0) return false;
    }
}

static void state_copy(dcp_json_state *dst, const dcp_json_state *src)
{
    dst->s = src->s;
    dst->depth = src->depth;
    memcpy(dst->f, src->f, src->depth * sizeof src->f[0]);
}

dcp_status dcp_json_state_create(const dcp_json_schema *s, dcp_json_state **out)
{
    *out = NULL;
    dcp_json_state *st = calloc(1, sizeof *st);
    if (!st) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    st->s = s;
    st->depth = 1;
    st->f[0] = (jframe){.kind = F_ROOT, .node = s->root, .prop = -1};
    *out = st;
    return DCP_OK;
}

void dcp_json_state_destroy(dcp_json_state *st)
{
    if (!st) return;
    free(st->walk);
    free(st);
}

void dcp_json_state_copy(dcp_json_state *dst, const dcp_json_state *src) { state_copy(dst, src); }

bool dcp_json_state_feed(dcp_json_state *st, const uint8_t *bytes, size_t n)
{
    dcp_json_state t;
    state_copy(&t, st);
    for (size_t i = 0; i < n; i++)
        if (!feed1(&t, bytes[i])) return false;
    state_copy(st, &t);
    return true;
}

bool dcp_json_state_can_end(const dcp_json_state *st)
{
    if (st->depth == 1) return st->f[0].phase == 1;
    if (st->depth != 2) return false;
    const jframe *f = &st->f[1];
    if (f->kind == F_NUM) return f->phase == N_ZERO || f->phase == N_INT || f->phase == N_FRAC || f->phase == N_EXP;
    if (f->kind == F_LIT) { /* a literal that is whole (another may extend it) */
        const uint32_t n = f->builtin ? 3 : st->s->nodes[f->node].n_lit;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t len;
            lit_text(st->s, f, i, &len);
            if ((f->cand >> i & 1) && len == f->n) return true;
        }
    }
    return false;
}

bool dcp_json_state_finished(const dcp_json_state *st)
{
    if (!dcp_json_state_can_end(st)) return false;
    dcp_json_state t;
    for (unsigned c = 0; c < 256; c++) {
        state_copy(&t, st);
        if (feed1(&t, (uint8_t)c)) return false;
    }
    return true;
}

/* ---- the vocabulary and its mask ------------------------------------------------------------ */

struct dcp_json_vocab {
    uint32_t n;
    uint8_t *bytes;           /* every token's bytes, by id */
    size_t *off;              /* [n + 1] token id's bytes: bytes[off[id], off[id + 1]) */
    uint32_t *order;          /* [n] ids sorted by their bytes */
    uint32_t *lcp;            /* [n] bytes order[i] shares with order[i - 1] */
    uint8_t *sbytes;          /* the bytes again in sorted order (the mask reads them in sequence) */
    size_t *soff;             /* [n + 1] order[i]'s bytes: sbytes[soff[i], soff[i + 1]) */
    size_t max_len;
};

static const dcp_json_vocab *sort_vocab;

static int cmp_tok(const void *a, const void *b)
{
    const dcp_json_vocab *v = sort_vocab;
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const size_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    const int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

dcp_status dcp_json_vocab_create(const dcp_tokenizer *t, dcp_json_vocab **out)
{
    *out = NULL;
    dcp_json_vocab *v = calloc(1, sizeof *v);
    if (!v) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    const uint32_t n = dcp_tokenizer_n_vocab(t);
    v->n = n;
    v->off = calloc((size_t)n + 1, sizeof *v->off);
    v->order = malloc((size_t)n * sizeof *v->order);
    v->lcp = calloc(n ? n : 1, sizeof *v->lcp);
    size_t total = 0, cap = 0;
    dcp_status st = DCP_OK;
    if (!v->off || !v->order || !v->lcp) goto oom;
    for (uint32_t id = 0; id < n; id++) {
        size_t len = 0;
        dcp_tokenizer_token_bytes(t, (int32_t)id, NULL, 0, &len);
        if (total + len > cap) {
            size_t c = cap ? cap * 2 : 1 << 16;
            while (c < total + len) c *= 2;
            uint8_t *b = realloc(v->bytes, c);
            if (!b) goto oom;
            v->bytes = b;
            cap = c;
        }
        if (len) dcp_tokenizer_token_bytes(t, (int32_t)id, (char *)v->bytes + total, len, &len);
        v->off[id] = total;
        total += len;
        if (len > v->max_len) v->max_len = len;
        v->order[id] = id;
    }
    v->off[n] = total;
    sort_vocab = v; /* qsort has no context argument; creation is not concurrent in practice */
    qsort(v->order, n, sizeof *v->order, cmp_tok);
    sort_vocab = NULL;
    for (uint32_t i = 1; i < n; i++) {
        const uint32_t a = v->order[i - 1], b = v->order[i];
        const size_t la = v->off[a + 1] - v->off[a], lb = v->off[b + 1] - v->off[b];
        uint32_t k = 0;
        while (k < la && k < lb && v->bytes[v->off[a] + k] == v->bytes[v->off[b] + k]) k++;
        v->lcp[i] = k;
    }
    if (!(v->sbytes = malloc(total ? total : 1)) || !(v->soff = malloc(((size_t)n + 1) * sizeof *v->soff))) goto oom;
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t id = v->order[i];
        const size_t len = v->off[id + 1] - v->off[id];
        v->soff[i] = at;
        memcpy(v->sbytes + at, v->bytes + v->off[id], len);
        at += len;
    }
    v->soff[n] = at;
    *out = v;
    return DCP_OK;
oom:
    st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    dcp_json_vocab_destroy(v);
    return st;
}

void dcp_json_vocab_destroy(dcp_json_vocab *v)
{
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->order);
    free(v->lcp);
    free(v->sbytes);
    free(v->soff);
    free(v);
}

uint32_t dcp_json_vocab_size(const dcp_json_vocab *v) { return v->n; }

const uint8_t *dcp_json_vocab_token(const dcp_json_vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= v->n) {
        *len = 0;
        return NULL;
    }
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

void dcp_json_state_mask(dcp_json_state *st, const dcp_json_vocab *v, const int32_t *end_ids, uint32_t n_end,
                         uint8_t *allowed)
{
    memset(allowed, 0, v->n);
    if (st->walk_cap < v->max_len + 1) {
        dcp_json_state *w = realloc(st->walk, (v->max_len + 1) * sizeof *w);
        if (w) {
            st->walk = w;
            st->walk_cap = v->max_len + 1;
        }
    }
    if (st->walk_cap >= v->max_len + 1) {
        /* walk[k]: the state after the first k bytes of the current token, valid for k <= valid */
        dcp_json_state *w = st->walk;
        state_copy(&w[0], st);
        size_t valid = 0;
        for (uint32_t i = 0; i < v->n; i++) {
            const uint8_t *b = v->sbytes + v->soff[i];
            const size_t len = v->soff[i + 1] - v->soff[i], l = i ? v->lcp[i] : 0;
            if (len == 0) continue;
            if (l > valid) continue; /* shares the prefix that failed at byte valid */
            size_t k = l;
            for (; k < len; k++) {
                state_copy(&w[k + 1], &w[k]);
                if (!feed1(&w[k + 1], b[k])) break;
            }
            valid = k;
            if (k == len) allowed[v->order[i]] = 1;
        }
    } else { /* out of memory for the walk: token by token */
        dcp_json_state t;
        for (uint32_t id = 0; id < v->n; id++) {
            const size_t len = v->off[id + 1] - v->off[id];
            state_copy(&t, st);
            allowed[id] = len && dcp_json_state_feed(&t, v->bytes + v->off[id], len);
        }
    }
    const bool end = dcp_json_state_can_end(st);
    for (uint32_t i = 0; i < n_end; i++)
        if (end_ids[i] >= 0 && (uint32_t)end_ids[i] < v->n) allowed[end_ids[i]] = 1;
    if (!end)
        for (uint32_t i = 0; i < n_end; i++)
            if (end_ids[i] >= 0 && (uint32_t)end_ids[i] < v->n) allowed[end_ids[i]] = 0;
}
