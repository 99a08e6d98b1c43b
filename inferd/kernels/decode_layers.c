/* A decode step's decoder layers in one call: the same kernels the torch
 * modules call (rms_norm, gguf_gemv, attention_inputs, decode_attention,
 * gated_activation), in the modules' order, on the same buffers' values, so
 * the result is the same bits; only the Python between them is gone (about
 * a dozen calls a layer, each with its checks and allocations, which at a
 * few rows cost as much as the layer's arithmetic).
 *
 * The kernels live in their own libraries; this file gets their addresses
 * (`Kernels`). A layer is a pre-norm block: Gemma's four norms (the residual
 * added by the post-norms) or Llama's two (the residual added here, in
 * float32, rounded to bf16 as torch's bf16 add rounds). Activations are bf16,
 * or float32 (`is_float`: an engine computing in float32), where the queries
 * go to decode attention rounded to bf16 and its output comes back widened,
 * as the modules' casts do. Every buffer is the caller's: see `Scratch`.
 */

#include <stdint.h>

#include "bf16.h"

typedef void (*rms_norm_fn)(const void *x, int64_t token_stride, int64_t T, int64_t W, int64_t D,
                            const float *weight, float eps, int scale_in_float, const void *residual, void *out,
                            int is_float);
typedef int (*gemv_fn)(int parts, const int *types, const uint8_t *const *ws, const int64_t *rows_of, int64_t K,
                       const void *x, int64_t M, const void *bias, int in_is_float, void *y, int y_is_float);
typedef void (*inputs_fn)(const void *qkv, int64_t row_stride, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                          const float *norm_weight, float eps, int scale_in_float, const void *cos,
                          const void *signed_sin, void *qk_out, uint16_t *k_cache, uint16_t *v_cache,
                          const int64_t *slots, int is_float);
typedef int (*attention_fn)(const uint16_t *q, int64_t q_row_stride, int64_t B, int64_t H, int64_t D,
                            const uint16_t *k_cache, const uint16_t *v_cache, int64_t Hkv, const int64_t *slots,
                            const float *mask, int64_t L, float scale, uint16_t *out);
typedef void (*activation_fn)(const void *gate_up, int64_t T, int64_t I, float a, float b, void *out, int is_float);

typedef struct {
    rms_norm_fn rms_norm;
    gemv_fn gemv;
    inputs_fn attention_inputs;
    attention_fn decode_attention;
    activation_fn gated_activation;
} Kernels;

/* One projection: `gguf_gemv`'s parts (see gguf_gemv.c), and its bias or NULL. */
typedef struct {
    int parts;
    const int *types;
    const uint8_t *const *weights;
    const int64_t *rows;
    int64_t out_features;
    const void *bias;
} Projection;

typedef struct {
    const float *input_norm, *attention_out_norm, *mlp_in_norm, *mlp_out_norm; /* out norms NULL: Llama's form */
    const float *qk_norm; /* [H + Hkv, D], or NULL */
    Projection qkv, o, gate_up, down;
    uint16_t *k_cache, *v_cache;
    int sliding;
} Layer;

typedef struct {
    int64_t hidden, heads, kv_heads, head_dim, intermediate;
    float eps, qk_eps, scale, act_a, act_b;
    int scale_in_float, qk_scale_in_float, is_float;
} Shape;

/* A run of decode rows sharing a context width; slots and masks [rows, width]. */
typedef struct {
    int64_t start, end;
    const int64_t *slots;
    const float *mask;
    int64_t width;
    const int64_t *sliding_slots; /* NULL: the full view serves sliding layers too */
    const float *sliding_mask;
    int64_t sliding_width;
} Group;

/* The step's buffers, each [T, its width] in the activations' type: x holds
 * them in and out; y takes them between norms that add a residual. Under
 * float32, queries and attended hold decode attention's bf16 rows. */
typedef struct {
    void *x, *y, *normed, *qkv, *qk, *attended, *projected, *gate_up, *activated;
    uint16_t *queries, *attended_bf16;
} Scratch;

static int project(const Kernels *k, const Projection *p, int64_t K, const void *x, int64_t T, void *y, int f) {
    return k->gemv(p->parts, p->types, p->weights, p->rows, K, x, T, p->bias, f, y, f);
}

/* x += y, as torch adds: bf16 in float32, rounded once. */
static void add_into(void *x, const void *y, int64_t n, int is_float) {
    if (is_float) {
        for (int64_t i = 0; i < n; i++) ((float *)x)[i] += ((const float *)y)[i];
        return;
    }
    uint16_t *a = x;
    const uint16_t *b = y;
    for (int64_t i = 0; i < n; i++) a[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

/* Decode attention over every group's rows. `q`: bf16 rows of `q_stride`; `out`: bf16 [T, H, D]. */
static int attend(const Kernels *k, const Shape *s, const Layer *L, const uint16_t *q, int64_t q_stride,
                  const Group *groups, int64_t n_groups, uint16_t *out) {
    const int64_t H = s->heads, D = s->head_dim;
    for (int64_t g = 0; g < n_groups; g++) {
        const Group *G = &groups[g];
        const int narrow = L->sliding && G->sliding_slots != NULL;
        int status = k->decode_attention(q + G->start * q_stride, q_stride, G->end - G->start, H, D, L->k_cache,
                                         L->v_cache, s->kv_heads, narrow ? G->sliding_slots : G->slots,
                                         narrow ? G->sliding_mask : G->mask, narrow ? G->sliding_width : G->width,
                                         s->scale, out + G->start * H * D);
        if (status) return status;
    }
    return 0;
}

/* 0 on success; a kernel's error status otherwise (-1 out of memory, -2 a refused shape). */
int inferd_decode_layers(const Kernels *k, const Shape *s, const Layer *layers, int64_t n_layers, int64_t T,
                         const void *global_cos, const void *global_sin, const void *local_cos, const void *local_sin,
                         const int64_t *slot_mapping, const Group *groups, int64_t n_groups, const Scratch *b) {
    const int64_t H = s->heads, Hkv = s->kv_heads, D = s->head_dim, hidden = s->hidden;
    const int f = s->is_float;
    int status;
    for (int64_t l = 0; l < n_layers; l++) {
        const Layer *L = &layers[l];
        const int gemma = L->attention_out_norm != NULL;
        k->rms_norm(b->x, hidden, T, 1, hidden, L->input_norm, s->eps, s->scale_in_float, NULL, b->normed, f);
        if ((status = project(k, &L->qkv, hidden, b->normed, T, b->qkv, f))) return status;
        k->attention_inputs(b->qkv, L->qkv.out_features, T, H, Hkv, D, L->qk_norm, s->qk_eps, s->qk_scale_in_float,
                            L->sliding ? local_cos : global_cos, L->sliding ? local_sin : global_sin, b->qk,
                            L->k_cache, L->v_cache, slot_mapping, f);
        if (f) {
            for (int64_t t = 0; t < T; t++)
                for (int64_t i = 0; i < H * D; i++)
                    b->queries[t * H * D + i] = float_to_bf16(((const float *)b->qk)[t * (H + Hkv) * D + i]);
            if ((status = attend(k, s, L, b->queries, H * D, groups, n_groups, b->attended_bf16))) return status;
            for (int64_t i = 0; i < T * H * D; i++) ((float *)b->attended)[i] = bf16_to_float(b->attended_bf16[i]);
        } else if ((status = attend(k, s, L, b->qk, (H + Hkv) * D, groups, n_groups, b->attended))) {
            return status;
        }
        if ((status = project(k, &L->o, H * D, b->attended, T, b->projected, f))) return status;
        if (gemma) {
            k->rms_norm(b->projected, hidden, T, 1, hidden, L->attention_out_norm, s->eps, s->scale_in_float, b->x,
                        b->y, f);
            k->rms_norm(b->y, hidden, T, 1, hidden, L->mlp_in_norm, s->eps, s->scale_in_float, NULL, b->normed, f);
        } else {
            add_into(b->x, b->projected, T * hidden, f);
            k->rms_norm(b->x, hidden, T, 1, hidden, L->mlp_in_norm, s->eps, s->scale_in_float, NULL, b->normed, f);
        }
        if ((status = project(k, &L->gate_up, hidden, b->normed, T, b->gate_up, f))) return status;
        k->gated_activation(b->gate_up, T, s->intermediate, s->act_a, s->act_b, b->activated, f);
        if ((status = project(k, &L->down, s->intermediate, b->activated, T, b->projected, f))) return status;
        if (gemma)
            k->rms_norm(b->projected, hidden, T, 1, hidden, L->mlp_out_norm, s->eps, s->scale_in_float, b->y, b->x, f);
        else
            add_into(b->x, b->projected, T * hidden, f);
    }
    return 0;
}
