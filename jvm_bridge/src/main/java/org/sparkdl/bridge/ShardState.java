package org.sparkdl.bridge;

import java.io.Serializable;

/**
 * The optimizer state of one AllReduce block (shard), cached on an executor between iterations, plus
 * what the iteration that produced it sends to the driver ({@link #result()}).
 */
final class ShardState implements Serializable {
    final int block;
    final long step;
    /** The Python optimizer's {@code state_names}, in order (e.g. exp_avg, exp_avg_sq). */
    final float[][] arrays;

    // What the iteration that produced this state returns to the driver (null/0 for a restored state).
    /** The block's new weights, float32 little-endian, when the driver reduces (it keeps them as they arrive, one
     * chunk of the next weights, {@link Frames#chunks}); null when they stay on the executor ({@link ResidentWeights}). */
    byte[] shard;
    /** Whether every value of the block's new weights is finite. */
    boolean finite = true;
    double lossSum;
    double normalizerSum;
    float[] bufferSum;
    long count;
    boolean missed;

    ShardState(int block, long step, float[][] arrays) {
        this.block = block;
        this.step = step;
        this.arrays = arrays;
    }

    /** The same state, flagged: a partition had no local data, so this block was not updated. */
    ShardState missedCopy() {
        ShardState s = new ShardState(block, step, arrays);
        s.missed = true;
        return s;
    }

    /** Length of every state array when this state stands for all-zero arrays ({@link #compact}), else -1. */
    private int zeroLength = -1;

    /**
     * This state, or a copy that stands for it without its arrays when they are all zero (a fit that starts fresh:
     * SGD's momentum, Adam's moments), so that shipping it does not ship hundreds of MB of zeros.
     */
    ShardState compact() {
        int n = arrays.length == 0 ? 0 : arrays[0].length;
        for (float[] a : arrays) {
            for (float v : a) {
                if (Float.floatToRawIntBits(v) != 0) {  // +0.0 only: a -0.0 must survive bit for bit
                    return this;
                }
            }
        }
        ShardState s = new ShardState(block, step, new float[arrays.length][0]);
        s.zeroLength = n;
        return s;
    }

    /** The state with its arrays ({@link #compact} undone). */
    ShardState expand() {
        if (zeroLength < 0) {
            return this;
        }
        return new ShardState(block, step, new float[arrays.length][zeroLength]);
    }

    float[][] copyArrays() {
        float[][] out = new float[arrays.length][];
        for (int i = 0; i < arrays.length; i++) {
            out[i] = arrays[i].clone();
        }
        return out;
    }

    /** A copy without the state arrays, for collecting to the driver. */
    ShardState result() {
        ShardState r = new ShardState(block, step, new float[0][]);
        r.shard = shard;
        r.finite = finite;
        r.lossSum = lossSum;
        r.normalizerSum = normalizerSum;
        r.bufferSum = bufferSum;
        r.count = count;
        r.missed = missed;
        return r;
    }
}
