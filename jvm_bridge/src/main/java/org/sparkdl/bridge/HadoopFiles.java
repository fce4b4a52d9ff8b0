package org.sparkdl.bridge;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileContext;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.StreamCapabilities;
import org.apache.hadoop.fs.UnsupportedFileSystemException;

/**
 * Files on any Hadoop {@link FileSystem} the session's Hadoop configuration serves ({@code hdfs://}, {@code s3a://},
 * {@code abfs://}, {@code gs://}, ...), for sparkdl's model files, checkpoints and run outputs on the driver.
 *
 * <p>Bytes cross py4j only as local file names: {@link #upload} streams a local file (that Python wrote) into the
 * file system in {@value #BUFFER}-byte blocks, {@link #download} streams a file into a new local temporary file (that
 * Python reads and deletes). Every path is a full URI; the file system is {@code FileSystem.get(uri, conf)} (Hadoop's
 * cache, never closed here) and the path handed to it has no scheme or authority, so an implementation registered
 * for another scheme ({@code fs.<scheme>.impl}) serves it as well.
 *
 * <p>Writes are atomic where the file system's rename is: a file is written under a temporary name in the target's
 * directory, its SHA-256 and length checked against what Python sent, then renamed into place; a failure at any
 * point deletes the temporary file and leaves the target as it was.
 */
public final class HadoopFiles {

    static final int BUFFER = 4 << 20;

    private static final AtomicLong FILES_WRITTEN = new AtomicLong();
    private static final AtomicLong BYTES_WRITTEN = new AtomicLong();
    private static final AtomicLong FILES_READ = new AtomicLong();
    private static final AtomicLong BYTES_READ = new AtomicLong();
    private static final AtomicLong ATOMIC_REPLACES = new AtomicLong();

    private final Configuration conf;
    /** FileContext per scheme and authority (empty: the scheme has no AbstractFileSystem); one client each. */
    private final Map<String, Optional<FileContext>> contexts = new ConcurrentHashMap<>();

    HadoopFiles(Configuration conf) {
        this.conf = conf;
    }

    private static Path path(String uri) {
        Path p = Path.getPathWithoutSchemeAndAuthority(new Path(uri));
        return p.toString().isEmpty() ? new Path("/") : p;
    }

    private FileSystem fs(String uri) throws IOException {
        return FileSystem.get(new Path(uri).toUri(), conf);
    }

    /** {@code "missing"}, {@code "file"} or {@code "dir"}. */
    public String kind(String uri) throws IOException {
        try {
            return fs(uri).getFileStatus(path(uri)).isDirectory() ? "dir" : "file";
        } catch (FileNotFoundException e) {
            return "missing";
        }
    }

    /** The names of a directory's entries, sorted. */
    public String[] list(String uri) throws IOException {
        FileStatus[] entries = fs(uri).listStatus(path(uri));
        String[] names = new String[entries.length];
        for (int i = 0; i < names.length; i++) {
            names[i] = entries[i].getPath().getName();
        }
        Arrays.sort(names);
        return names;
    }

    /** Create a directory and its parents (nothing if it exists). */
    public void mkdirs(String uri) throws IOException {
        if (!fs(uri).mkdirs(path(uri))) {
            throw new IOException("cannot create the directory " + uri);
        }
    }

    /** Delete a file or a directory tree (nothing if it does not exist). */
    public void delete(String uri) throws IOException {
        FileSystem fs = fs(uri);
        Path p = path(uri);
        if (!fs.delete(p, true) && fs.exists(p)) {
            throw new IOException("cannot delete " + uri);
        }
    }

    /** Rename a file or directory; {@code dst} must not exist (then {@link FileAlreadyExistsException}). */
    public void rename(String src, String dst) throws IOException {
        renameNew(fs(dst), path(src), path(dst), dst);
    }

    private static void renameNew(FileSystem fs, Path src, Path dst, String what) throws IOException {
        if (fs.exists(dst)) {
            throw new FileAlreadyExistsException(what + " already exists");
        }
        if (!fs.rename(src, dst)) {
            throw new IOException("cannot rename " + src + " to " + what);
        }
    }

    /**
     * Replace the file {@code dst} with {@code src}: atomically through {@code FileContext.rename(..., OVERWRITE)}
     * when the scheme has an AbstractFileSystem (HDFS, S3A, ABFS, ...); otherwise the old file is renamed aside,
     * the new one into place (the old one back if that fails), then the old one deleted.
     */
    public void replace(String src, String dst) throws IOException {
        replace(fs(dst), path(src), path(dst), dst);
    }

    private void replace(FileSystem fs, Path src, Path dst, String uri) throws IOException {
        Optional<FileContext> fc = context(uri);
        if (fc.isPresent()) {
            fc.get().rename(src, dst, Options.Rename.OVERWRITE);
            ATOMIC_REPLACES.incrementAndGet();
            return;
        }
        if (!fs.exists(dst)) {
            renameNew(fs, src, dst, uri);
            return;
        }
        if (fs.getFileStatus(dst).isDirectory()) {
            throw new IOException("cannot replace the directory " + uri + " with a file");
        }
        Path old = sibling(dst, ".old-");
        renameNew(fs, dst, old, uri + " (aside)");
        try {
            renameNew(fs, src, dst, uri);
        } catch (IOException | RuntimeException e) {
            fs.rename(old, dst);
            throw e;
        }
        fs.delete(old, false);
    }

    private Optional<FileContext> context(String uri) {
        URI u = new Path(uri).toUri();
        String key = u.getScheme() + "://" + (u.getAuthority() == null ? "" : u.getAuthority());
        return contexts.computeIfAbsent(key, k -> {
            try {
                return Optional.of(FileContext.getFileContext(URI.create(k + "/"), conf));
            } catch (UnsupportedFileSystemException e) {
                return Optional.empty();
            }
        });
    }

    private static Path sibling(Path p, String tag) {
        return new Path(p.getParent(), "." + p.getName() + tag + UUID.randomUUID().toString().substring(0, 12));
    }

    /**
     * Copy the local file {@code localFile} to {@code uri}: written under a temporary name beside it, synced where
     * the stream can ({@code hsync}), its SHA-256 (hex) and length checked against {@code sha256} and the local file,
     * then renamed into place ({@code overwrite}: replacing a file there, see {@link #replace}; else an existing
     * {@code uri} is a {@link FileAlreadyExistsException}). On any failure the temporary file is deleted and
     * {@code uri} is untouched.
     */
    public void upload(String uri, String localFile, String sha256, boolean overwrite) throws IOException {
        FileSystem fs = fs(uri);
        Path dst = path(uri);
        if (!overwrite && fs.exists(dst)) {
            throw new FileAlreadyExistsException(uri + " already exists");
        }
        Path tmp = sibling(dst, ".tmp-");
        MessageDigest md = sha256();
        long n = 0;
        try {
            try (InputStream in = Files.newInputStream(Paths.get(localFile));
                 FSDataOutputStream out = fs.create(tmp, false)) {
                n = copy(in, out, md);
                if (out.hasCapability(StreamCapabilities.HSYNC)) {
                    out.hsync();
                }
            }
            String got = hex(md.digest());
            if (!got.equals(sha256)) {
                throw new IOException("checksum mismatch writing " + uri + ": sent " + sha256 + ", wrote " + got);
            }
            long len = fs.getFileStatus(tmp).getLen();
            if (len != n) {
                throw new IOException("short write to " + uri + ": " + n + " bytes sent, " + len + " on the file system");
            }
            if (overwrite && fs.exists(dst)) {
                replace(fs, tmp, dst, uri);
            } else {
                renameNew(fs, tmp, dst, uri);
            }
        } catch (IOException | RuntimeException e) {
            fs.delete(tmp, false);
            throw e;
        }
        FILES_WRITTEN.incrementAndGet();
        BYTES_WRITTEN.addAndGet(n);
    }

    /**
     * Copy the file {@code uri} into a new local temporary file (readable by this user only) and return its path;
     * the caller deletes it. A checksumming file system (HDFS, {@code LocalFileSystem}) verifies what it reads.
     */
    public String download(String uri) throws IOException {
        java.nio.file.Path local = Files.createTempFile("sparkdl-hadoop-", ".part");
        long n;
        try (InputStream in = fs(uri).open(path(uri));
             OutputStream out = Files.newOutputStream(local)) {
            n = copy(in, out, null);
        } catch (IOException | RuntimeException e) {
            Files.deleteIfExists(local);
            throw e;
        }
        FILES_READ.incrementAndGet();
        BYTES_READ.addAndGet(n);
        return local.toString();
    }

    /**
     * Files written, bytes written, files read, bytes read by {@link #upload}/{@link #download}, and replaces done
     * by an atomic rename with overwrite (see {@link #replace}), in this JVM.
     */
    public static long[] counters() {
        return new long[]{FILES_WRITTEN.get(), BYTES_WRITTEN.get(), FILES_READ.get(), BYTES_READ.get(),
                ATOMIC_REPLACES.get()};
    }

    private static long copy(InputStream in, OutputStream out, MessageDigest md) throws IOException {
        byte[] buf = new byte[BUFFER];
        long n = 0;
        for (int r; (r = in.read(buf)) > 0; n += r) {
            out.write(buf, 0, r);
            if (md != null) {
                md.update(buf, 0, r);
            }
        }
        return n;
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static String hex(byte[] digest) {
        StringBuilder s = new StringBuilder(2 * digest.length);
        for (byte b : digest) {
            s.append(Character.forDigit((b >> 4) & 15, 16)).append(Character.forDigit(b & 15, 16));
        }
        return s.toString();
    }
}
