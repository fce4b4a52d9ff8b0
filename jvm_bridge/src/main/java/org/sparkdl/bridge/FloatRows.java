package org.sparkdl.bridge;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.util.Arrays;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.UnsafeArrayData;
import org.apache.spark.sql.catalyst.expressions.objects.StaticInvoke;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A SQL expression from one feature value (a {@code pyspark.ml.linalg} Vector, dense or sparse, or an
 * {@code array<float>} / {@code array<double>}) to its {@code size} values as float32, little endian, in one
 * {@code binary} value of {@code 4 * size} bytes. Python receives a batch of such rows as one contiguous Arrow
 * buffer and views it as a {@code (n, size)} float32 array without per-element work.
 *
 * <p>The expression is Spark's {@code StaticInvoke} of the {@code pack*} methods below, so generated code calls
 * them on Spark's internal row format ({@link ArrayData}; a Vector is its SQL struct
 * {@code <type, size, indices, values>}) with no per-element conversion to Java objects: an
 * {@code array<float>} row is one memory copy plus a finiteness scan, a Vector or {@code array<double>} row one
 * pass that narrows each value. (A Java UDF received each array element boxed, and each Vector as a new
 * object; that conversion was most of the JVM's time in {@code transform}.) {@code StaticInvoke}'s constructor
 * and {@code ExpressionUtils} (Spark 4.0+) are Spark internals, not public API; sparkdl needs pyspark 4.1 or
 * newer, and the jar is compiled against the installed pyspark, so a changed signature shows at install time.
 *
 * <p>A row that is null, has another number of values, holds a null element, a NaN or an infinite value (after
 * narrowing to float32), or (sparse) indices outside {@code [0, size)} or not strictly increasing is invalid: it
 * becomes null, or fails the task with the {@code error} message, its {@code {row}} replaced by the row, when
 * that is not null. A column whose element type is not its {@code kind} fails the task.
 */
public final class FloatRows {

    private static final int MAX_SHOWN = 300;
    private static final int EXPONENT = 0x7f800000;
    private static final boolean NATIVE_LE = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN;
    private static final VarHandle FLOAT_LE = MethodHandles.byteArrayViewVarHandle(float[].class,
            ByteOrder.LITTLE_ENDIAN);

    private FloatRows() {
    }

    /**
     * The packing expression for {@code column}: {@code kind} is "vector", "float" ({@code array<float>}) or
     * "double" ({@code array<double>}); {@code error} null makes invalid rows null.
     */
    static Column column(Column column, String kind, int size, String error) {
        if (size < 1) {
            throw new IllegalArgumentException("size must be >= 1, got " + size);
        }
        String method;
        switch (kind) {
            case "vector": method = "packVector"; break;
            case "float": method = "packFloats"; break;
            case "double": method = "packDoubles"; break;
            default: throw new IllegalArgumentException(
                    "kind must be 'vector', 'float' or 'double', got '" + kind + "'");
        }
        Expression[] args = {ExpressionUtils.expression(column), Literal.create(size, DataTypes.IntegerType),
            Literal.create(error, DataTypes.StringType)};
        StaticInvoke invoke = new StaticInvoke(FloatRows.class, DataTypes.BinaryType, method,
                CollectionConverters.asScala(Arrays.asList(args)).toSeq(),
                CollectionConverters.asScala(Arrays.<AbstractDataType>asList()).toSeq(),
                false, true, true, Option.empty());
        return ExpressionUtils.column(invoke);
    }

    /**
     * A Vector packed: {@code value} is its SQL struct {@code <type: 0 sparse / 1 dense, size, indices, values>}, an
     * {@link InternalRow} (Spark passes a UDT's value as an Object).
     */
    public static byte[] packVector(Object value, int size, UTF8String error) {
        InternalRow v = (InternalRow) value;
        byte[] out = v == null ? null : v.getByte(0) != 1 ? sparse(v, size)
                : v.isNullAt(3) ? null : narrow(checked(v.getArray(3), 8, "Vector"), size);
        return out != null || error == null ? out : fail(error, shownVector(v));
    }

    /** An {@code array<double>} row packed. */
    public static byte[] packDoubles(ArrayData a, int size, UTF8String error) {
        byte[] out = a == null || hasNull(checked(a, 8, "array<double>")) ? null : narrow(a, size);
        return out != null || error == null ? out : fail(error, shown(a, false));
    }

    /** An {@code array<float>} row packed. */
    public static byte[] packFloats(ArrayData a, int size, UTF8String error) {
        byte[] out = a == null || a.numElements() != size || hasNull(checked(a, 4, "array<float>")) ? null
                : copyFloats(a, size);
        return out != null || error == null ? out : fail(error, shown(a, true));
    }

    private static byte[] narrow(ArrayData values, int size) {
        if (values.numElements() != size) {
            return null;
        }
        byte[] out = new byte[4 * size];
        int bad = 0;
        if (NATIVE_LE && values instanceof UnsafeArrayData) {  // straight from the bytes: 1.3 vs 1.7 us per 784
            UnsafeArrayData u = (UnsafeArrayData) values;
            Object base = u.getBaseObject();
            long from = u.getBaseOffset() + UnsafeArrayData.calculateHeaderPortionInBytes(size);
            for (int i = 0; i < size; i++) {
                float f = (float) Platform.getDouble(base, from + 8L * i);
                bad |= nonFinite(Float.floatToRawIntBits(f));
                Platform.putFloat(out, Platform.BYTE_ARRAY_OFFSET + 4L * i, f);
            }
            return bad >= 0 ? out : null;
        }
        for (int i = 0; i < size; i++) {
            float f = (float) values.getDouble(i);
            bad |= nonFinite(Float.floatToRawIntBits(f));
            put(out, i, f);
        }
        return bad >= 0 ? out : null;
    }

    private static byte[] sparse(InternalRow v, int size) {
        if (v.isNullAt(1) || v.getInt(1) != size || v.isNullAt(2) || v.isNullAt(3)) {
            return null;
        }
        ArrayData idx = v.getArray(2);
        ArrayData values = v.getArray(3);
        int nnz = values.numElements();
        if (idx.numElements() != nnz) {
            return null;
        }
        byte[] out = new byte[4 * size];
        int previous = -1;
        for (int k = 0; k < nnz; k++) {
            int j = idx.getInt(k);
            float f = (float) values.getDouble(k);
            if (j <= previous || j >= size || nonFinite(Float.floatToRawIntBits(f)) < 0) {
                return null;  // indices out of range or not strictly increasing, as SparseVector requires
            }
            put(out, j, f);
            previous = j;
        }
        return out;
    }

    /** The float values of {@code a}: one memory copy for Spark's unsafe arrays on little-endian machines. */
    private static byte[] copyFloats(ArrayData a, int size) {
        byte[] out = new byte[4 * size];
        if (NATIVE_LE && a instanceof UnsafeArrayData) {
            UnsafeArrayData u = (UnsafeArrayData) a;
            Platform.copyMemory(u.getBaseObject(), u.getBaseOffset()
                    + UnsafeArrayData.calculateHeaderPortionInBytes(size), out, Platform.BYTE_ARRAY_OFFSET, 4L * size);
            int bad = 0;
            for (int i = 0; i < size; i++) {
                bad |= nonFinite(Platform.getInt(out, Platform.BYTE_ARRAY_OFFSET + 4L * i));
            }
            return bad >= 0 ? out : null;
        }
        int bad = 0;
        for (int i = 0; i < size; i++) {
            float f = a.getFloat(i);
            bad |= nonFinite(Float.floatToRawIntBits(f));
            put(out, i, f);
        }
        return bad >= 0 ? out : null;
    }

    /**
     * Negative iff the float32 with these bits is NaN or infinite (every exponent bit set): the exponent field
     * plus one in its lowest bit carries into the sign bit exactly then. ORed over a row (no branch per value),
     * the row is finite iff the result is >= 0.
     */
    private static int nonFinite(int bits) {
        return (bits & EXPONENT) + 0x00800000;
    }

    /**
     * {@code a} itself, after checking that an unsafe array's byte size fits elements of {@code elementSize}
     * bytes: a column of another element type than its {@code kind} says fails here instead of being misread. (An
     * array of one element cannot tell 4 from 8 bytes: both round up to 8.)
     */
    private static ArrayData checked(ArrayData a, int elementSize, String type) {
        if (a instanceof UnsafeArrayData) {
            UnsafeArrayData u = (UnsafeArrayData) a;
            long n = u.numElements();
            long expected = UnsafeArrayData.calculateHeaderPortionInBytes(u.numElements())
                    + (elementSize * n + 7) / 8 * 8;
            if (u.getSizeInBytes() != expected) {
                throw new IllegalArgumentException("sparkdl FloatRows: the feature column is not " + type + " ("
                        + u.getSizeInBytes() + " bytes for " + n + " elements); pass the column's own kind");
            }
        }
        return a;
    }

    private static boolean hasNull(ArrayData a) {
        if (a instanceof UnsafeArrayData) {
            UnsafeArrayData u = (UnsafeArrayData) a;
            long words = (UnsafeArrayData.calculateHeaderPortionInBytes(u.numElements()) - 8) / 8;
            for (long w = 0; w < words; w++) {
                if (Platform.getLong(u.getBaseObject(), u.getBaseOffset() + 8 + 8 * w) != 0) {
                    return true;
                }
            }
            return false;
        }
        for (int i = 0; i < a.numElements(); i++) {
            if (a.isNullAt(i)) {
                return true;
            }
        }
        return false;
    }

    private static void put(byte[] out, int i, float f) {
        if (NATIVE_LE) {
            Platform.putFloat(out, Platform.BYTE_ARRAY_OFFSET + 4L * i, f);
        } else {
            FLOAT_LE.set(out, 4 * i, f);
        }
    }

    private static String shown(ArrayData a, boolean floats) {
        if (a == null) {
            return "null";
        }
        StringBuilder s = new StringBuilder("[");
        for (int i = 0; i < a.numElements() && s.length() <= MAX_SHOWN; i++) {
            s.append(i == 0 ? "" : ", ").append(a.isNullAt(i) ? "null"
                    : floats ? String.valueOf(a.getFloat(i)) : String.valueOf(a.getDouble(i)));
        }
        return s.append(']').toString();
    }

    /** A Vector's struct as Spark shows the Vector: {@code [v0,v1,...]} or {@code (size,[indices],[values])}. */
    private static String shownVector(InternalRow v) {
        if (v == null) {
            return "null";
        }
        String values = v.isNullAt(3) ? "null" : shown(v.getArray(3), false).replace(", ", ",");
        if (v.getByte(0) == 1) {
            return values;
        }
        String indices = v.isNullAt(2) ? "null" : Arrays.toString(v.getArray(2).toIntArray()).replace(", ", ",");
        return "(" + (v.isNullAt(1) ? "null" : String.valueOf(v.getInt(1))) + "," + indices + "," + values + ")";
    }

    private static byte[] fail(UTF8String error, String shown) {
        if (shown.length() > MAX_SHOWN) {
            shown = shown.substring(0, MAX_SHOWN - 4) + "...";
        }
        throw new IllegalArgumentException(error.toString().replace("{row}", shown));
    }
}
