package org.sparkdl.bridge;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The binary records exchanged with sparkdl's Python gradient tasks (sparkdl/engine/jvm_path.py writes
 * the same layout). All numbers are little-endian.
 *
 * <pre>
 * gradient task output, one record per (partition, block):
 *   int32 kind | int32 block | int32 partition | int32 reserved | float64 loss | float64 normalizer |
 *   int64 count | float32[] payload
 * kind GRAD: payload = the partition's summed gradient of that block
 * kind BUFFERS (block 0 only): payload = the partition's buffers (BatchNorm statistics) times its count
 * kind MISS: no payload; the task had no data for that partition (the iteration is rerun on full data)
 * </pre>
 */
final class Frames {
    static final int HEADER = 40;
    static final int GRAD = 1;
    static final int MISS = 2;
    static final int BUFFERS = 3;

    private Frames() {
    }

    static ByteBuffer wrap(byte[] b) {
        return ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
    }

    static int kind(byte[] f) {
        return wrap(f).getInt(0);
    }

    static int block(byte[] f) {
        return wrap(f).getInt(4);
    }

    static int partition(byte[] f) {
        return wrap(f).getInt(8);
    }

    static double loss(byte[] f) {
        return wrap(f).getDouble(16);
    }

    static double normalizer(byte[] f) {
        return wrap(f).getDouble(24);
    }

    static long count(byte[] f) {
        return wrap(f).getLong(32);
    }

    static int payloadLength(byte[] f) {
        return (f.length - HEADER) / 4;
    }

    /** Add the payload of {@code f} to {@code acc} element by element in float32 (IEEE, no fusion). */
    static void addPayload(byte[] f, float[] acc) {
        int n = payloadLength(f);
        if (n != acc.length) {
            throw new IllegalArgumentException("sparkdl bridge: gradient record of block " + block(f) + " from partition "
                    + partition(f) + " has " + n + " floats, expected " + acc.length);
        }
        ByteBuffer b = wrap(f);
        for (int i = 0; i < n; i++) {
            acc[i] += b.getFloat(HEADER + 4 * i);
        }
    }

    static float[] payload(byte[] f) {
        float[] out = new float[payloadLength(f)];
        wrap(f).position(HEADER).slice().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
        return out;
    }

    static float[] floats(byte[] b, int offset, int n) {
        float[] out = new float[n];
        wrap(b).position(offset).slice().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
        return out;
    }

    static byte[] bytes(float[] values) {
        ByteBuffer b = ByteBuffer.allocate(4 * values.length).order(ByteOrder.LITTLE_ENDIAN);
        b.asFloatBuffer().put(values);
        return b.array();
    }
}
