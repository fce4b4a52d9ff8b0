package org.sparkdl.bridge;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;

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
        byte[] out = new byte[4 * size];
        FloatBuffer f = ByteBuffer.wrap(out).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
        boolean ok = value != null && fill(value, f) && finite(f);
        if (ok) {
            return out;
        }
        if (error != null) {
            String shown = String.valueOf(value);
            if (shown.length() > MAX_SHOWN) {
                shown = shown.substring(0, MAX_SHOWN - 4) + "...";
            }
            throw new IllegalArgumentException(error.replace("{row}", shown));
        }
        return null;
    }

    /** Writes the values of {@code value} into {@code f}; false if their number is not {@code size}. */
    private boolean fill(Object value, FloatBuffer f) {
        if (value instanceof DenseVector) {
            double[] v = ((DenseVector) value).values();
            if (v.length != size) {
                return false;
            }
            for (int i = 0; i < size; i++) {
                f.put(i, (float) v[i]);
            }
            return true;
        }
        if (value instanceof SparseVector) {
            SparseVector s = (SparseVector) value;
            if (s.size() != size) {
                return false;
            }
            int[] idx = s.indices();
            double[] v = s.values();
            for (int k = 0; k < idx.length; k++) {
                if (idx[k] < 0 || idx[k] >= size) {
                    return false;
                }
                f.put(idx[k], (float) v[k]);
            }
            return true;
        }
        if (value instanceof scala.collection.Seq) {
            scala.collection.Seq<?> seq = (scala.collection.Seq<?>) value;
            if (seq.length() != size) {
                return false;
            }
            Iterator<?> it = seq.iterator();
            for (int i = 0; i < size; i++) {
                Object e = it.next();
                if (e == null) {
                    return false;
                }
                f.put(i, ((Number) e).floatValue());
            }
            return true;
        }
        throw new IllegalArgumentException("sparkdl FloatRows: unsupported feature value of class "
                + value.getClass().getName() + " (expected a Vector or an array of numbers)");
    }

    private boolean finite(FloatBuffer f) {
        for (int i = 0; i < size; i++) {
            if (!Float.isFinite(f.get(i))) {
                return false;
            }
        }
        return true;
    }
}
