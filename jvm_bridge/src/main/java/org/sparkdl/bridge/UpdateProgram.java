package org.sparkdl.bridge;

import java.io.Serializable;
import java.nio.ByteBuffer;

/**
 * One iteration's optimizer update, with every scalar already computed (and rounded to float32) by the
 * Python driver exactly as sparkdl's numba kernels receive them (sparkdl/optim/sgd.py, adam.py), so the
 * Java arithmetic below is the kernels' arithmetic, operation for operation.
 *
 * <pre>
 * int32 optimizer (1 SGD, 2 Adam) | int32 flags (1 nesterov, 2 first step, 4 amsgrad, 8 decoupled) |
 * float32 gscale, gclip, momentum, oneMinusDampening, w1, oneMinusW1, beta2, oneMinusBeta2, bc2Sqrt, eps |
 * float64 clipNorm (0: none) | int32 K | per block: int32 nseg | per segment: int32 lo, int32 hi, float32 a, float32 wd, float32 decay
 * </pre>
 * (segment bounds are block-relative; a = -lr for SGD, -lr/bc1 for Adam; decay = 1 - lr * wd for AdamW).
 * With {@code clipNorm} the gradient scale is not {@code gscale} but computed from the mean gradient of the
 * block ({@link GradientNorm}), which must then be the whole gradient (one block).
 */
final class UpdateProgram implements Serializable {
    static final int SGD = 1;
    static final int ADAM = 2;

    final int optimizer;
    final boolean nesterov, first, amsgrad, decoupled;
    final float gscale, gclip, momentum, oneMinusDampening, w1, oneMinusW1, beta2, oneMinusBeta2, bc2Sqrt, eps;
    final double clipNorm;
    final int[][] segLo, segHi;
    final float[][] segA, segWd, segDecay;

    UpdateProgram(byte[] encoded) {
        ByteBuffer b = Frames.wrap(encoded);
        optimizer = b.getInt();
        int flags = b.getInt();
        nesterov = (flags & 1) != 0;
        first = (flags & 2) != 0;
        amsgrad = (flags & 4) != 0;
        decoupled = (flags & 8) != 0;
        gscale = b.getFloat();
        gclip = b.getFloat();
        momentum = b.getFloat();
        oneMinusDampening = b.getFloat();
        w1 = b.getFloat();
        oneMinusW1 = b.getFloat();
        beta2 = b.getFloat();
        oneMinusBeta2 = b.getFloat();
        bc2Sqrt = b.getFloat();
        eps = b.getFloat();
        clipNorm = b.getDouble();
        int k = b.getInt();
        if (clipNorm != 0.0 && k != 1) {
            throw new IllegalArgumentException("sparkdl bridge: clip_norm needs one block, got " + k);
        }
        segLo = new int[k][];
        segHi = new int[k][];
        segA = new float[k][];
        segWd = new float[k][];
        segDecay = new float[k][];
        for (int i = 0; i < k; i++) {
            int n = b.getInt();
            segLo[i] = new int[n];
            segHi[i] = new int[n];
            segA[i] = new float[n];
            segWd[i] = new float[n];
            segDecay[i] = new float[n];
            for (int s = 0; s < n; s++) {
                segLo[i][s] = b.getInt();
                segHi[i][s] = b.getInt();
                segA[i][s] = b.getFloat();
                segWd[i][s] = b.getFloat();
                segDecay[i][s] = b.getFloat();
            }
        }
        if (b.hasRemaining()) {
            throw new IllegalArgumentException("sparkdl bridge: update program has " + b.remaining() + " extra bytes");
        }
    }

    int numBlocks() {
        return segLo.length;
    }

    /** Number of state arrays per shard, in the order of the Python optimizer's {@code state_names}. */
    int numStateArrays() {
        if (optimizer == SGD) {
            return momentum != 0f ? 1 : 0;
        }
        return amsgrad ? 3 : 2;
    }

    /** The factor the gradient of block {@code k} is scaled by: {@code gscale}, or the clip-norm factor of the
     * whole mean gradient {@code g}. */
    float scale(int k, float[] g) {
        return clipNorm == 0.0 ? gscale : GradientNorm.clipScale(g, segLo[k], segHi[k], clipNorm);
    }

    /** Apply the update of elements {@code [from, to)} of block {@code k} to {@code p} in place, given the mean
     * gradient {@code g} and the block's {@link #scale}: each element's arithmetic depends on nothing else, so
     * ranges may run on different threads. */
    void apply(int k, float[] p, float[] g, float[][] state, int from, int to, float scale) {
        if (optimizer == SGD) {
            sgd(k, p, g, state.length > 0 ? state[0] : null, scale, from, to);
        } else if (optimizer == ADAM) {
            adam(k, p, g, state[0], state[1], amsgrad ? state[2] : null, scale, from, to);
        } else {
            throw new IllegalArgumentException("sparkdl bridge: unknown optimizer code " + optimizer);
        }
    }

    // The loops below read every setting into a local first: the training JVM runs the C1 compiler, which neither
    // hoists field loads nor loop-invariant tests out of a loop (Adam over 61,706 values: 0.51 -> 0.36 ms). The
    // arithmetic is unchanged, operation for operation.

    /** sparkdl/optim/sgd.py {@code _sgd_kernel}. */
    private void sgd(int k, float[] p, float[] g, float[] buf, float scale, int from, int to) {
        final float clip = gclip;
        final float mom = momentum;
        final float keep = oneMinusDampening;
        final boolean useMomentum = mom != 0f;
        final boolean firstStep = first;
        final boolean nest = nesterov;
        for (int s = 0; s < segLo[k].length; s++) {
            final float negLr = segA[k][s];
            final float wd = segWd[k][s];
            final boolean decay = wd != 0f;
            for (int i = Math.max(from, segLo[k][s]), hi = Math.min(to, segHi[k][s]); i < hi; i++) {
                float gi = g[i];
                float d = (gi > clip ? clip : gi < -clip ? -clip : gi) * scale;
                float pi = p[i];
                if (decay) {
                    d = d + wd * pi;
                }
                if (useMomentum) {
                    float b = firstStep ? d : buf[i] * mom + keep * d;
                    buf[i] = b;
                    d = nest ? d + mom * b : b;
                }
                p[i] = pi + negLr * d;
            }
        }
    }

    /** sparkdl/optim/adam.py {@code _adam_kernel} (Adam, AdamW, AMSGrad). */
    private void adam(int k, float[] p, float[] g, float[] m, float[] v, float[] vmax, float scale, int from,
                      int to) {
        final float clip = gclip;
        final float a1 = w1;
        final float keep1 = oneMinusW1;
        final boolean smallW1 = Math.abs(a1) < 0.5f;
        final float b2 = beta2;
        final float keep2 = oneMinusBeta2;
        final float bc2 = bc2Sqrt;
        final float epsilon = eps;
        final boolean decoupledDecay = decoupled;
        final boolean ams = vmax != null;
        for (int s = 0; s < segLo[k].length; s++) {
            final float negStep = segA[k][s];
            final float wd = segWd[k][s];
            final float decay = segDecay[k][s];
            final boolean coupled = !decoupledDecay && wd != 0f;
            for (int i = Math.max(from, segLo[k][s]), hi = Math.min(to, segHi[k][s]); i < hi; i++) {
                float gi = g[i];
                float d = (gi > clip ? clip : gi < -clip ? -clip : gi) * scale;
                float pi = p[i];
                if (decoupledDecay) {
                    pi = pi * decay;
                } else if (coupled) {
                    d = d + wd * pi;
                }
                float mo = m[i];
                float mi = smallW1 ? mo + a1 * (d - mo) : d - (d - mo) * keep1;
                float vi = v[i] * b2 + keep2 * d * d;
                m[i] = mi;
                v[i] = vi;
                if (ams) {
                    vi = Math.max(vmax[i], vi);
                    vmax[i] = vi;
                }
                float denom = (float) Math.sqrt(vi) / bc2 + epsilon;
                p[i] = pi + negStep * mi / denom;
            }
        }
    }
}
