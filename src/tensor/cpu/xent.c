/* src/tensor/cpu/xent.c - softmax cross-entropy with label smoothing (PyTorch's
 * F.cross_entropy(label_smoothing=e): (1 - e) * NLL + e * mean over classes of -log p) or
 * with soft targets (timm's SoftTargetCrossEntropy: mixup's), and
 * the patch-embedding im2col. Tests: tests/test_ops.c, tests/test_vit.c (PyTorch). */
#include <math.h>
#include <stddef.h>
#include <omp.h>

#include "tensor/cpu/kernels.h"
#include "tensor/xent_rules.h"

/* The rows' losses are summed per thread (static shares of the rows) and the threads' sums
 * added in thread order: the same bits on every run for a given team (an OpenMP reduction
 * adds them in the order threads finish). */
enum { MAX_PARTS = 64 };

static int team(void)
{
    return omp_get_max_threads() < MAX_PARTS ? omp_get_max_threads() : MAX_PARTS;
}

static double in_order(const double *part, int used)
{
    double total = 0;
    for (int t = 0; t < used; t++)
        total += part[t];
    return total;
}

/* The mean over the B rows of their losses: on hard targets (soft NULL) or soft ones. */
static float mean_loss(float *probs, const float *logits, const int64_t *targets,
                       const float *soft, int B, int K, float smoothing)
{
    double part[MAX_PARTS];
    int used = 1;
#pragma omp parallel num_threads(team())
    {
        double total = 0;
#pragma omp for schedule(static)
        for (int b = 0; b < B; b++) {
            float *p = probs + (size_t)b * K;
            const float *z = logits + (size_t)b * K;
            total += soft ? tbi_xent_soft_row(p, z, soft + (size_t)b * K, K)
                          : tbi_xent_hard_row(p, z, targets[b], K, smoothing);
        }
        part[omp_get_thread_num()] = total;
        if (omp_get_thread_num() == 0)
            used = omp_get_num_threads();
    }
    return (float)(in_order(part, used) / B);
}

float tbi_xent_fwd(float *probs, const float *logits, const int64_t *targets, int B, int K,
                   float smoothing)
{
    return mean_loss(probs, logits, targets, NULL, B, K, smoothing);
}

void tbi_xent_bwd(float *dlogits, const float *probs, const int64_t *targets, int B, int K,
                  float smoothing)
{
    const struct tbi_xent_q q = tbi_xent_q_rule(B, K, smoothing);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++)
            dlogits[(size_t)b * K + k] = tbi_xent_hard_grad_rule(
                probs[(size_t)b * K + k], k == targets[b] ? q.on : q.off, q.inv_b);
}

float tbi_xent_soft_fwd(float *probs, const float *logits, const float *targets, int B, int K)
{
    return mean_loss(probs, logits, NULL, targets, B, K, 0);
}

void tbi_xent_soft_bwd(float *dlogits, const float *probs, const float *targets, int B, int K)
{
    float inv_b = 1.0f / B;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++)
        tbi_xent_soft_grad_row(dlogits + (size_t)b * K, probs + (size_t)b * K,
                               targets + (size_t)b * K, K, inv_b);
}

void tbi_patchify(float *cols, const float *video, int B, int C, int T, int H, int W, int TU,
                  int P)
{
    int Tp = T / TU, Hp = H / P, Wp = W / P, N = Tp * Hp * Wp, row = C * TU * P * P;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int n = 0; n < N; n++) {
            int t = n / (Hp * Wp), h = n / Wp % Hp, w = n % Wp;
            float *dst = cols + ((size_t)b * N + n) * row;
            for (int c = 0; c < C; c++)
                for (int dt = 0; dt < TU; dt++)
                    for (int dy = 0; dy < P; dy++) {
                        const float *src = video + ((((size_t)b * C + c) * T + t * TU + dt) * H +
                                                    h * P + dy) * W + (size_t)w * P;
                        for (int dx = 0; dx < P; dx++)
                            *dst++ = src[dx];
                    }
        }
    }
}
