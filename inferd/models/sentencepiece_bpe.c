// SentencePiece-style BPE over a vocabulary's tables: encode text to ids, decode ids to text.
//
// The rules are the ones a `tokenizers` BPE model applies to such a vocabulary (no
// pre-tokenizer; spaces written as U+2581; byte fallback; merges ranked by a list), so
// the ids are the same ids, checked against that model whenever the tables are built:
//   1. added tokens are matched first in the raw text, leftmost, then longest;
//   2. every stretch between them gets "▁" in front (when the vocabulary asks) and its
//      spaces written as "▁";
//   3. each character becomes its piece, else its bytes' <0xHH> pieces, else the unknown
//      piece (a run of unknown characters fused into one);
//   4. the adjacent pair with the lowest merge rank is joined, leftmost first, until none is left.
// Decoding writes "▁" as a space, joins runs of <0xHH> pieces into their bytes (U+FFFD per
// byte where they are not UTF-8), and drops the one leading space step 2 added.
//
// Everything a call needs is its own or read-only, so calls run on any thread at once.

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *bytes;
    int64_t *offsets;  // entry i is bytes[offsets[i] .. offsets[i + 1])
    int32_t *ids;
    int32_t *slots;  // entry index, or -1; open addressing over a power of two
    uint64_t mask;
} piece_table;

typedef struct {
    uint64_t *keys;  // left id << 32 | right id; UINT64_MAX when empty
    int32_t *rank, *joined;
    uint64_t mask;
} pair_table;

typedef struct {
    int32_t *token;  // the added token ending at a node, or -1
    uint64_t *edge_keys;  // node << 8 | byte; UINT64_MAX when empty
    int32_t *edge_child;
    uint64_t edge_mask;
    int32_t nodes;
    uint8_t starts[256];  // bytes an added token can begin with
} added_trie;

typedef struct {
    piece_table vocab;  // the model's pieces
    pair_table merges;
    added_trie added;
    uint8_t *spelled;  // each id's piece as decoding writes it ("▁" as a space)
    int64_t *spelled_offsets;
    int16_t *byte_value;  // the byte an id's <0xHH> piece stands for, or -1
    uint8_t *present;  // whether an id has a piece at all
    int32_t ids, byte_ids[256], unknown;
    int fuse_unknown, byte_fallback, space_prefix;
} spm;

static const uint8_t SPACE_MARK[3] = {0xE2, 0x96, 0x81};

static uint64_t hash_bytes(const uint8_t *p, int64_t n) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (int64_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_key(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) ^ (key >> 31); }

static uint64_t table_size(int64_t entries) {
    uint64_t size = 16;
    while (size < (uint64_t)entries * 2) size <<= 1;
    return size;
}

static void *copy_of(const void *source, size_t bytes) {
    void *copy = malloc(bytes ? bytes : 1);
    if (copy && bytes) memcpy(copy, source, bytes);
    return copy;
}

// -- the model's pieces ----------------------------------------------------------------
static int32_t piece_lookup(const piece_table *t, const uint8_t *p, int64_t n) {
    for (uint64_t s = hash_bytes(p, n) & t->mask;; s = (s + 1) & t->mask) {
        int32_t e = t->slots[s];
        if (e < 0) return -1;
        int64_t start = t->offsets[e], len = t->offsets[e + 1] - start;
        if (len == n && memcmp(t->bytes + start, p, n) == 0) return t->ids[e];
    }
}

static int piece_table_build(piece_table *t, int64_t n, const uint8_t *bytes, const int64_t *offsets,
                             const int32_t *ids) {
    t->bytes = copy_of(bytes, offsets[n]);
    t->offsets = copy_of(offsets, (n + 1) * sizeof(int64_t));
    t->ids = copy_of(ids, n * sizeof(int32_t));
    uint64_t size = table_size(n);
    t->slots = malloc(size * sizeof(int32_t));
    t->mask = size - 1;
    if (!t->bytes || !t->offsets || !t->ids || !t->slots) return 0;
    memset(t->slots, 0xff, size * sizeof(int32_t));
    for (int64_t e = 0; e < n; e++) {
        const uint8_t *p = bytes + offsets[e];
        int64_t len = offsets[e + 1] - offsets[e];
        uint64_t s = hash_bytes(p, len) & t->mask;
        for (;; s = (s + 1) & t->mask) {
            int32_t other = t->slots[s];
            if (other < 0) break;
            int64_t other_len = offsets[other + 1] - offsets[other];
            if (other_len == len && memcmp(bytes + offsets[other], p, len) == 0) break;  // the later entry wins
        }
        t->slots[s] = (int32_t)e;
    }
    return 1;
}

// -- merges --------------------------------------------------------------------------
static int pair_lookup(const pair_table *t, int32_t left, int32_t right, int32_t *rank, int32_t *joined) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t s = hash_key(key) & t->mask;; s = (s + 1) & t->mask) {
        if (t->keys[s] == UINT64_MAX) return 0;
        if (t->keys[s] == key) {
            *rank = t->rank[s];
            *joined = t->joined[s];
            return 1;
        }
    }
}

static int pair_table_build(pair_table *t, int64_t n, const int32_t *merges) {
    uint64_t size = table_size(n);
    t->keys = malloc(size * sizeof(uint64_t));
    t->rank = malloc(size * sizeof(int32_t));
    t->joined = malloc(size * sizeof(int32_t));
    t->mask = size - 1;
    if (!t->keys || !t->rank || !t->joined) return 0;
    memset(t->keys, 0xff, size * sizeof(uint64_t));
    for (int64_t m = 0; m < n; m++) {  // a pair listed twice keeps its last rank, as a map built in order does
        uint64_t key = (uint64_t)(uint32_t)merges[3 * m] << 32 | (uint32_t)merges[3 * m + 1];
        uint64_t s = hash_key(key) & t->mask;
        while (t->keys[s] != UINT64_MAX && t->keys[s] != key) s = (s + 1) & t->mask;
        t->keys[s] = key;
        t->rank[s] = (int32_t)m;
        t->joined[s] = merges[3 * m + 2];
    }
    return 1;
}

// -- added tokens ----------------------------------------------------------------------
static int32_t trie_child(const added_trie *t, int32_t node, uint8_t byte) {
    uint64_t key = (uint64_t)node << 8 | byte;
    for (uint64_t s = hash_key(key) & t->edge_mask;; s = (s + 1) & t->edge_mask) {
        if (t->edge_keys[s] == UINT64_MAX) return -1;
        if (t->edge_keys[s] == key) return t->edge_child[s];
    }
}

static int trie_build(added_trie *t, int64_t n, const uint8_t *bytes, const int64_t *offsets, const int32_t *ids) {
    int64_t max_nodes = offsets[n] + 1;
    uint64_t size = table_size(max_nodes);
    t->token = malloc(max_nodes * sizeof(int32_t));
    t->edge_keys = malloc(size * sizeof(uint64_t));
    t->edge_child = malloc(size * sizeof(int32_t));
    t->edge_mask = size - 1;
    t->nodes = 1;
    memset(t->starts, 0, sizeof t->starts);
    if (!t->token || !t->edge_keys || !t->edge_child) return 0;
    memset(t->token, 0xff, max_nodes * sizeof(int32_t));
    memset(t->edge_keys, 0xff, size * sizeof(uint64_t));
    for (int64_t e = 0; e < n; e++) {
        int32_t node = 0;
        if (offsets[e + 1] == offsets[e]) continue;  // an empty token matches nothing
        t->starts[bytes[offsets[e]]] = 1;
        for (int64_t i = offsets[e]; i < offsets[e + 1]; i++) {
            int32_t child = trie_child(t, node, bytes[i]);
            if (child < 0) {
                uint64_t key = (uint64_t)node << 8 | bytes[i];
                uint64_t s = hash_key(key) & t->edge_mask;
                while (t->edge_keys[s] != UINT64_MAX) s = (s + 1) & t->edge_mask;
                child = t->nodes++;
                t->edge_keys[s] = key;
                t->edge_child[s] = child;
            }
            node = child;
        }
        t->token[node] = ids[e];
    }
    return 1;
}

// The longest added token at the start of text: its length, or 0.
static int64_t longest_added(const added_trie *t, const uint8_t *text, int64_t n, int32_t *id) {
    int64_t best = 0;
    int32_t node = 0;
    for (int64_t i = 0; i < n; i++) {
        node = trie_child(t, node, text[i]);
        if (node < 0) break;
        if (t->token[node] >= 0) {
            best = i + 1;
            *id = t->token[node];
        }
    }
    return best;
}

// -- encoding --------------------------------------------------------------------------
typedef struct { int32_t id, prev, next, len; } symbol;
typedef struct { int32_t rank, pos, joined; } candidate;

typedef struct {
    uint8_t *text;
    symbol *symbols;
    candidate *heap;
    int64_t text_cap, symbol_cap, heap_cap, heap_len;
    int32_t *out;
    int64_t out_len, out_cap;
    int failed;
} encoder;

static void *grown(void *buffer, int64_t *cap, int64_t need, size_t item) {
    if (need <= *cap) return buffer;
    int64_t cap2 = need > 2 * *cap ? need : 2 * *cap;
    void *bigger = realloc(buffer, cap2 * item);
    if (bigger) *cap = cap2;
    return bigger;
}

static void emit(encoder *e, int32_t id) {
    if (e->out_len < e->out_cap) e->out[e->out_len] = id;
    e->out_len++;
}

static int before(candidate a, candidate b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void heap_push(encoder *e, candidate c) {
    candidate *h = e->heap;
    int64_t i = e->heap_len++;
    while (i > 0 && before(c, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static candidate heap_pop(encoder *e) {
    candidate *h = e->heap, top = h[0], last = h[--e->heap_len];
    int64_t i = 0, n = e->heap_len;
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && before(h[child + 1], h[child])) child++;
        if (!before(h[child], last)) break;
        h[i] = h[child];
        i = child;
    }
    if (n > 0) h[i] = last;
    return top;
}

static int64_t add_symbol(encoder *e, int64_t count, int32_t id, int32_t len) {
    symbol *s = e->symbols;
    s[count] = (symbol){id, (int32_t)count - 1, -1, len};
    if (count > 0) s[count - 1].next = (int32_t)count;
    return count + 1;
}

static void push_pair(encoder *e, const spm *t, int32_t pos) {
    symbol *s = e->symbols;
    candidate c = {0, pos, 0};
    if (pair_lookup(&t->merges, s[pos].id, s[s[pos].next].id, &c.rank, &c.joined)) heap_push(e, c);
}

static int utf8_length(uint8_t lead) {
    return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

static void encode_stretch(encoder *e, const spm *t, const uint8_t *raw, int64_t n) {
    if (n == 0) return;
    // Normalized: "▁" in front where asked, each space as "▁".
    int64_t need = 3 * n + 3, len = 0;
    if (!(e->text = grown(e->text, &e->text_cap, need, 1))) { e->failed = 1; return; }
    if (t->space_prefix) { memcpy(e->text, SPACE_MARK, 3); len = 3; }
    for (int64_t i = 0; i < n; i++) {
        if (raw[i] == ' ') { memcpy(e->text + len, SPACE_MARK, 3); len += 3; }
        else e->text[len++] = raw[i];
    }
    e->symbols = grown(e->symbols, &e->symbol_cap, len, sizeof(symbol));
    e->heap = grown(e->heap, &e->heap_cap, 3 * len + 1, sizeof(candidate));  // each merge pushes two at most
    if (!e->symbols || !e->heap) { e->failed = 1; return; }
    // Characters to pieces.
    int64_t count = 0, unknown_len = 0;
    for (int64_t i = 0; i < len;) {
        int64_t width = utf8_length(e->text[i]);
        if (width > len - i) width = len - i;
        int32_t id = piece_lookup(&t->vocab, e->text + i, width);
        if (id >= 0) {
            if (unknown_len) { count = add_symbol(e, count, t->unknown, (int32_t)unknown_len); unknown_len = 0; }
            count = add_symbol(e, count, id, (int32_t)width);
        } else {
            int spelled = t->byte_fallback;
            for (int64_t b = 0; spelled && b < width; b++) spelled = t->byte_ids[e->text[i + b]] >= 0;
            if (spelled) {  // (an unknown run before it is added after it, as the reference model does)
                for (int64_t b = 0; b < width; b++) count = add_symbol(e, count, t->byte_ids[e->text[i + b]], 1);
            } else if (t->unknown >= 0) {
                if (unknown_len && !t->fuse_unknown) count = add_symbol(e, count, t->unknown, (int32_t)unknown_len), unknown_len = 0;
                unknown_len += width;
            }
        }
        i += width;
    }
    if (unknown_len) count = add_symbol(e, count, t->unknown, (int32_t)unknown_len);
    // Merges, lowest rank first, leftmost among equals.
    symbol *s = e->symbols;
    e->heap_len = 0;
    for (int64_t i = 0; i + 1 < count; i++) push_pair(e, t, (int32_t)i);
    while (e->heap_len > 0) {
        candidate top = heap_pop(e);
        symbol *left = &s[top.pos];
        if (left->len == 0 || left->next < 0) continue;
        symbol right = s[left->next];
        int32_t rank, joined;
        if (!pair_lookup(&t->merges, left->id, right.id, &rank, &joined) || joined != top.joined) continue;  // stale
        s[left->next].len = 0;
        left->id = top.joined;
        left->len += right.len;
        left->next = right.next;
        if (right.next >= 0) s[right.next].prev = top.pos;
        if (left->prev >= 0) push_pair(e, t, left->prev);
        if (left->next >= 0) push_pair(e, t, top.pos);
    }
    for (int64_t i = 0; i < count; i++)
        if (s[i].len) emit(e, s[i].id);
}

// Writes up to `cap` ids of `text` to `out`; returns how many there are (more than `cap`:
// call again with room for them), or -1 when memory ran out.
int64_t inferd_spm_encode(const spm *t, const uint8_t *text, int64_t n, int32_t *out, int64_t cap) {
    encoder e = {0};
    e.out = out;
    e.out_cap = cap;
    int64_t stretch = 0;
    for (int64_t i = 0; i < n;) {
        int32_t id = -1;
        int64_t matched = t->added.starts[text[i]] ? longest_added(&t->added, text + i, n - i, &id) : 0;
        if (matched) {
            encode_stretch(&e, t, text + stretch, i - stretch);
            emit(&e, id);
            i += matched;
            stretch = i;
        } else {
            i++;
        }
    }
    encode_stretch(&e, t, text + stretch, n - stretch);
    free(e.text);
    free(e.symbols);
    free(e.heap);
    return e.failed ? -1 : e.out_len;
}

// -- decoding --------------------------------------------------------------------------
static int valid_utf8(const uint8_t *p, int64_t n) {
    for (int64_t i = 0; i < n;) {
        uint8_t c = p[i];
        int64_t width;
        uint32_t lo = 0x80, hi = 0xBF;  // the second byte's range
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) width = 2;
        else if (c >= 0xE0 && c <= 0xEF) { width = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { width = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return 0;
        if (i + width > n || p[i + 1] < lo || p[i + 1] > hi) return 0;
        for (int64_t k = 2; k < width; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xBF) return 0;
        i += width;
    }
    return 1;
}

typedef struct { uint8_t *bytes; int64_t len, cap; int failed; } text_buffer;

static void append(text_buffer *b, const uint8_t *p, int64_t n) {
    if (!(b->bytes = grown(b->bytes, &b->cap, b->len + n, 1))) { b->failed = 1; b->len = b->cap = 0; return; }
    memcpy(b->bytes + b->len, p, n);
    b->len += n;
}

static void flush_bytes(text_buffer *b, const uint8_t *bytes, int64_t n) {
    static const uint8_t REPLACEMENT[3] = {0xEF, 0xBF, 0xBD};
    if (valid_utf8(bytes, n)) append(b, bytes, n);
    else for (int64_t i = 0; i < n; i++) append(b, REPLACEMENT, 3);
}

// Writes up to `cap` bytes of the text of `ids` to `out`; returns its length in bytes
// (more than `cap`: call again with that room), or -1 when memory ran out.
int64_t inferd_spm_decode(const spm *t, const int32_t *ids, int64_t n, uint8_t *out, int64_t cap) {
    text_buffer text = {0}, pending = {0};
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->ids || !t->present[id]) continue;  // no piece: nothing written
        if (t->byte_value[id] >= 0) {
            uint8_t byte = (uint8_t)t->byte_value[id];
            append(&pending, &byte, 1);
            continue;
        }
        if (pending.len) { flush_bytes(&text, pending.bytes, pending.len); pending.len = 0; }
        append(&text, t->spelled + t->spelled_offsets[id], t->spelled_offsets[id + 1] - t->spelled_offsets[id]);
    }
    if (pending.len) flush_bytes(&text, pending.bytes, pending.len);
    int64_t skip = t->space_prefix && text.len > 0 && text.bytes[0] == ' ' ? 1 : 0;
    int64_t len = text.len - skip;
    if (len > 0) memcpy(out, text.bytes + skip, len < cap ? len : cap);
    int failed = text.failed || pending.failed;
    free(text.bytes);
    free(pending.bytes);
    return failed ? -1 : len;
}

// -- the vocabulary ----------------------------------------------------------------------
// The id of `piece`: an added token's first, then the model's; -1 when neither has it.
int32_t inferd_spm_piece_id(const spm *t, const uint8_t *piece, int64_t n) {
    int32_t id = -1;
    if (n > 0 && longest_added(&t->added, piece, n, &id) == n) return id;
    return piece_lookup(&t->vocab, piece, n);
}

void inferd_spm_free(spm *t) {
    if (!t) return;
    free(t->vocab.bytes); free(t->vocab.offsets); free(t->vocab.ids); free(t->vocab.slots);
    free(t->merges.keys); free(t->merges.rank); free(t->merges.joined);
    free(t->added.token); free(t->added.edge_keys); free(t->added.edge_child);
    free(t->spelled); free(t->spelled_offsets); free(t->byte_value); free(t->present);
    free(t);
}

// The byte a piece "<0xHH>" stands for (after spaces are written back), or -1. Like the
// reference, the two characters after "0x" are read as a base-16 number of one byte,
// which also admits a leading "+".
static int16_t byte_piece(const uint8_t *p, int64_t n) {
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    int value = 0;
    for (int k = 3; k < 5; k++) {
        uint8_t c = p[k];
        int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (k == 3 && c == '+') continue;
        if (digit < 0) return -1;
        value = value * 16 + digit;
    }
    return (int16_t)value;
}

// Tables in, a vocabulary out (NULL when memory ran out). The model's pieces: `vocab_*`;
// merges: [left, right, joined] triples, best first; added tokens: `added_*`; each id's
// piece for decoding: `id_*`, where `id_present` is 0 for an id that has none (its span
// empty). Nothing passed in is kept: the tables are copied.
spm *inferd_spm_new(int64_t vocab_n, const uint8_t *vocab_bytes, const int64_t *vocab_offsets, const int32_t *vocab_ids,
                    int64_t merges_n, const int32_t *merges,
                    int64_t added_n, const uint8_t *added_bytes, const int64_t *added_offsets, const int32_t *added_ids,
                    int32_t ids, const uint8_t *id_bytes, const int64_t *id_offsets, const uint8_t *id_present,
                    int32_t unknown, int fuse_unknown, int byte_fallback, int space_prefix) {
    spm *t = calloc(1, sizeof(spm));
    if (!t) return NULL;
    t->ids = ids;
    t->unknown = unknown;
    t->fuse_unknown = fuse_unknown;
    t->byte_fallback = byte_fallback;
    t->space_prefix = space_prefix;
    if (!piece_table_build(&t->vocab, vocab_n, vocab_bytes, vocab_offsets, vocab_ids) ||
        !pair_table_build(&t->merges, merges_n, merges) ||
        !trie_build(&t->added, added_n, added_bytes, added_offsets, added_ids)) {
        inferd_spm_free(t);
        return NULL;
    }
    for (int b = 0; b < 256; b++) {
        char name[7];
        static const char HEX[] = "0123456789ABCDEF";
        memcpy(name, "<0x", 3);
        name[3] = HEX[b >> 4];
        name[4] = HEX[b & 15];
        name[5] = '>';
        t->byte_ids[b] = piece_lookup(&t->vocab, (const uint8_t *)name, 6);
    }
    // Each id's piece with "▁" written as a space (never longer), and the byte it stands for.
    t->spelled = malloc(id_offsets[ids] ? id_offsets[ids] : 1);
    t->spelled_offsets = malloc((ids + 1) * sizeof(int64_t));
    t->byte_value = malloc((ids ? ids : 1) * sizeof(int16_t));
    t->present = copy_of(id_present, ids);
    if (!t->spelled || !t->spelled_offsets || !t->byte_value || !t->present) { inferd_spm_free(t); return NULL; }
    int64_t len = 0;
    for (int32_t i = 0; i < ids; i++) {
        const uint8_t *p = id_bytes + id_offsets[i], *end = id_bytes + id_offsets[i + 1];
        t->spelled_offsets[i] = len;
        for (; p < end; p++) {
            if (end - p >= 3 && memcmp(p, SPACE_MARK, 3) == 0) { t->spelled[len++] = ' '; p += 2; }
            else t->spelled[len++] = *p;
        }
        t->byte_value[i] = byte_piece(t->spelled + t->spelled_offsets[i], len - t->spelled_offsets[i]);
    }
    t->spelled_offsets[ids] = len;
    return t;
}
