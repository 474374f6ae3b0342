package e2e

import (
	"fmt"
	"io"
)

// cpioFile is one regular file of a newc archive.
type cpioFile struct {
	Name string // path inside the archive, without a leading slash
	Mode uint32 // full st_mode, e.g. 0o100755
	Data []byte
}

// writeCpio writes files as an uncompressed "newc" (SVR4, no CRC) cpio
// archive, the format the kernel unpacks into its initramfs:
//
//	+--------+---------------------------------------------------------------+
//	| 6 B    | magic "070701"                                                |
//	| 13x8 B | ASCII hex: ino mode uid gid nlink mtime filesize devmajor     |
//	|        |            devminor rdevmajor rdevminor namesize check        |
//	| name   | namesize bytes incl. NUL, then NUL padding to 4 (with header) |
//	| data   | filesize bytes, then NUL padding to 4                         |
//	+--------+---------------------------------------------------------------+
//
// terminated by an entry named "TRAILER!!!". Owner root, mtime 0.
func writeCpio(w io.Writer, files []cpioFile) error {
	for i, f := range files {
		if err := writeCpioEntry(w, uint32(i+1), f.Name, f.Mode, f.Data); err != nil {
			return err
		}
	}
	return writeCpioEntry(w, 0, "TRAILER!!!", 0, nil)
}

func writeCpioEntry(w io.Writer, ino uint32, name string, mode uint32, data []byte) error {
	nlink := uint32(1)
	if name == "TRAILER!!!" {
		nlink = 0
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	buf := make([]byte, 0, len(hdr)+len(name)+8+len(data)+4)
	buf = append(buf, hdr...)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	buf = append(buf, data...)
	buf = pad4(buf)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("e2e: writing cpio entry %s: %w", name, err)
	}
	return nil
}

// pad4 pads b with NULs to a multiple of 4 bytes. Every entry starts aligned,
// so aligning the entry's own length aligns the archive.
func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
