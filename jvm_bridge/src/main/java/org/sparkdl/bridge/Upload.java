package org.sparkdl.bridge;

import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * A file the JVM creates for Python to write large bytes into (weights, optimizer states), read once and deleted:
 * no path from Python is ever read, and nothing crosses py4j as base64 text (a 64 MiB py4j call held about four
 * times its size in the driver's heap, which then grew to its limit for a 100M-parameter model).
 */
final class Upload {
    /** What reads the uploaded bytes. */
    interface Reader<T> {
        T read(InputStream in) throws IOException;
    }

    private Path path;

    /** A new empty file, readable and writable by this user only (the previous one, if unread, is deleted). */
    String create() {
        try {
            delete();
            path = Files.createTempFile("sparkdl-upload-", ".bin"); // rw------- on POSIX file systems
            return path.toString();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The file read by {@code reader}, which must read it to its end; then the file is deleted. */
    <T> T read(Reader<T> reader) {
        if (path == null) {
            throw new IllegalStateException("sparkdl bridge: nothing was uploaded (call uploadFile first)");
        }
        try {
            try (InputStream in = new BufferedInputStream(Files.newInputStream(path), 1 << 16)) {
                T out = reader.read(in);
                if (in.read() != -1) {
                    throw new IllegalArgumentException("sparkdl bridge: the uploaded file has extra bytes");
                }
                return out;
            } finally {
                delete();
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Delete the file if it is there. */
    void delete() {
        if (path != null) {
            try {
                Files.deleteIfExists(path);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            path = null;
        }
    }

    static void readFully(InputStream in, byte[] into) throws IOException {
        if (in.readNBytes(into, 0, into.length) != into.length) {
            throw new IllegalArgumentException("sparkdl bridge: the uploaded file ends early");
        }
    }
}
