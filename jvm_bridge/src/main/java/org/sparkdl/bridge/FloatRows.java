package org.sparkdl.bridge;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

import org.apache.spark.ml.linalg.DenseVector;
import org.apache.spark.ml.linalg.SparseVector;
import org.apache.spark.sql.api.java.UDF1;

import scala.collection.Iterator;

/**
 * A SQL function from one feature value (a {@code pyspark.ml.linalg} Vector, dense or sparse, or an array of
 * numbers) to its {@code size} values as float32, little endian, in one {@code binary} value of
 * {@code 4 * size} bytes. Python receives a batch of such rows as one contiguous Arrow buffer and views it as a
 * {@code (n, size)} float32 array without per-element work.
 *
 * <p>A row that is null, has another number of values, or holds a NaN or infinite value is invalid: it becomes
 * null, or (when built with a non-null {@code error} message) fails the task with that message followed by
 * the row.
 */
final class FloatRows implements UDF1<Object, byte[]> {

    private static final long serialVersionUID = 1L;
    private static final int MAX_SHOWN = 300;
    private static final VarHandle FLOAT_LE = MethodHandles.byteArrayViewVarHandle(float[].class,
            ByteOrder.LITTLE_ENDIAN);

    private final int size;
    private final String error;

    FloatRows(int size, String error) {
        if (size < 1) {
            throw new IllegalArgumentException("size must be >= 1, got " + size);
        }
        this.size = size;
        this.error = error;
    }

    @Override
    public byte[] call(Object value) {
        byte[] out = value == null ? null : pack(value);
        if (out != null || error == null) {
            return out;
        }
        String shown = String.valueOf(value);
        if (shown.length() > MAX_SHOWN) {
            shown = shown.substring(0, MAX_SHOWN - 4) + "...";
        }
        throw new IllegalArgumentException(error.replace("{row}", shown));
    }

    /** The values of {@code value} as float32 bytes, in one pass; null if it is invalid. */
    private byte[] pack(Object value) {
        if (value instanceof DenseVector) {
            double[] v = ((DenseVector) value).values();
            return v.length == size ? packDoubles(v) : null;
        }
        if (value instanceof SparseVector) {
            SparseVector s = (SparseVector) value;
            if (s.size() != size) {
                return null;
            }
            int[] idx = s.indices();
            double[] v = s.values();
            byte[] out = new byte[4 * size];
            for (int k = 0; k < idx.length; k++) {
                float f = (float) v[k];
                if (idx[k] < 0 || idx[k] >= size || !Float.isFinite(f)) {
                    return null;
                }
                FLOAT_LE.set(out, 4 * idx[k], f);
            }
            return out;
        }
        if (value instanceof scala.collection.Seq) {
            scala.collection.Seq<?> seq = (scala.collection.Seq<?>) value;
            if (seq.length() != size) {
                return null;
            }
            byte[] out = new byte[4 * size];
            Iterator<?> it = seq.iterator();
            for (int i = 0; i < size; i++) {
                Object e = it.next();
                if (e == null) {
                    return null;
                }
                float f = ((Number) e).floatValue();
                if (!Float.isFinite(f)) {
                    return null;
                }
                FLOAT_LE.set(out, 4 * i, f);
            }
            return out;
        }
        throw new IllegalArgumentException("sparkdl FloatRows: unsupported feature value of class "
                + value.getClass().getName() + " (expected a Vector or an array of numbers)");
    }

    private byte[] packDoubles(double[] v) {
        byte[] out = new byte[4 * size];
        for (int i = 0; i < size; i++) {
            float f = (float) v[i];
            if (!Float.isFinite(f)) {
                return null;
            }
            FLOAT_LE.set(out, 4 * i, f);
        }
        return out;
    }
}
