package org.sparkdl.bridge;

import java.math.BigDecimal;

/**
 * Clipping by global L2 norm on the JVM, with the exact float64 arithmetic of the Python path:
 * {@code Optimizer.partial_sq_norm} (sparkdl/optim/base.py: per non-frozen segment, {@code partial_sq_norm}
 * of sparkdl/optim/clip.py — squares summed sequentially in blocks of 8192 elements, then the block sums
 * with numpy's pairwise summation — and {@code math.fsum} over the segments) and {@code clip_coef}.
 */
final class GradientNorm {
    /** sparkdl/optim/clip.py {@code _BLOCK}. */
    static final int BLOCK = 8192;

    private GradientNorm() {
    }

    /** The float32 factor {@code min(1, maxNorm / (sqrt(||g||^2) + 1e-6))} over the segments of {@code g}. */
    static float clipScale(float[] g, int[] segLo, int[] segHi, double maxNorm) {
        double total;
        if (segLo.length == 1 && segLo[0] == 0 && segHi[0] == g.length) {
            total = sqNorm(g, 0, g.length);
        } else {
            BigDecimal exact = BigDecimal.ZERO;  // math.fsum: the correctly rounded sum
            for (int s = 0; s < segLo.length; s++) {
                exact = exact.add(new BigDecimal(sqNorm(g, segLo[s], segHi[s])));
            }
            total = exact.doubleValue();
        }
        double coef = maxNorm / (Math.sqrt(total) + 1e-6);
        return (float) Math.min(coef, 1.0);
    }

    /** {@code partial_sq_norm(g[lo:hi])}. */
    static double sqNorm(float[] g, int lo, int hi) {
        int n = hi - lo;
        if (n <= 0) {
            return 0.0;
        }
        int blocks = (n + BLOCK - 1) / BLOCK;
        double[] sums = new double[blocks];
        for (int b = 0; b < blocks; b++) {
            double s = 0.0;
            for (int i = lo + b * BLOCK, end = Math.min(hi, lo + (b + 1) * BLOCK); i < end; i++) {
                double v = g[i];
                s += v * v;
            }
            sums[b] = s;
        }
        return pairwiseSum(sums, 0, blocks);
    }

    /** numpy's pairwise summation of float64 ({@code np.sum}: 8 accumulators per 128-element leaf). */
    static double pairwiseSum(double[] a, int off, int n) {
        if (n < 8) {
            double res = 0.0;
            for (int i = 0; i < n; i++) {
                res += a[off + i];
            }
            return res;
        }
        if (n <= 128) {
            double[] r = new double[8];
            System.arraycopy(a, off, r, 0, 8);
            int i;
            for (i = 8; i < n - (n % 8); i += 8) {
                for (int j = 0; j < 8; j++) {
                    r[j] += a[off + i + j];
                }
            }
            double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
            for (; i < n; i++) {
                res += a[off + i];
            }
            return res;
        }
        int n2 = n / 2;
        n2 -= n2 % 8;
        return pairwiseSum(a, off, n2) + pairwiseSum(a, off + n2, n - n2);
    }
}
